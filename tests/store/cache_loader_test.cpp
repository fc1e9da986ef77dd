// CacheLoader against real redis-servers: get/num_keys/cleanup, the write
// buffer, sharding over two servers, and the faults that must fall back to
// load_fn (corrupt value, server killed, nothing listening).
#include <bagua/cache.h>
#include <bagua/launch.h>
#include <bagua/redis_server.h>

#include "store/key_sharding.h"
#include "store/redis_store.h"
#include "store/redis_test_support.h"

#include <gtest/gtest.h>

#include <signal.h>

#include <cerrno>
#include <thread>

namespace {

using namespace bagua;
using namespace bagua::testing;

struct CountingLoad {
  int calls = 0;
  CacheLoader::LoadFn fn() {
    return [this](const std::string& key) {
      ++calls;
      return "value of " + key;
    };
  }
};

TEST(KeySharding, IsFnv1a64ModuloTheServers) {
  EXPECT_EQ(store::fnv1a_64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(store::fnv1a_64("a"), 0xaf63dc4c8601ec8cULL);  // the published FNV-1a test vector
  EXPECT_EQ(store::shard_of("a", 7), 0xaf63dc4c8601ec8cULL % 7);
}

TEST(CacheLoader, GetLoadsOnceThenServesTheStoredValueToEveryLoaderOfTheName) {
  auto server = start_test_server();
  std::vector<std::string> warnings;
  CacheLoader loader(loader_options({server.get()}, "ds", &warnings));
  CountingLoad load;
  EXPECT_EQ(loader.get("7", load.fn()), "value of 7");
  EXPECT_EQ(loader.get("7", load.fn()), "value of 7");
  EXPECT_EQ(load.calls, 1);
  EXPECT_EQ(loader.num_keys(), 1);
  EXPECT_EQ(connect_to(*server)->command({"EXISTS", "ds_7"})->integer, 1) << "Bagua's key format";

  CacheLoader other(loader_options({server.get()}, "ds", &warnings));
  EXPECT_EQ(other.get("7", load.fn()), "value of 7");
  EXPECT_EQ(load.calls, 1) << "a second loader with the same dataset_name sees the entry";

  CacheLoader stranger(loader_options({server.get()}, "other", &warnings));
  stranger.get("7", load.fn());
  EXPECT_EQ(load.calls, 2);
  EXPECT_EQ(loader.num_keys(), 2);

  loader.cleanup();
  EXPECT_EQ(loader.num_keys(), 1) << "cleanup() deletes only its own dataset_name's keys";
  loader.get("7", load.fn());
  EXPECT_EQ(load.calls, 3);
  EXPECT_TRUE(warnings.empty());
}

TEST(CacheLoader, WritesWaitForAFullBufferThenGoOutTogether) {
  auto server = start_test_server();
  std::vector<std::string> warnings;
  CacheLoader loader(loader_options({server.get()}, "buf", &warnings, /*writer_buffer_size=*/5));
  CountingLoad load;
  for (int i = 0; i < 4; ++i) loader.get(std::to_string(i), load.fn());
  EXPECT_EQ(loader.num_keys(), 0);
  EXPECT_EQ(loader.get("2", load.fn()), "value of 2") << "a queued value is served";
  EXPECT_EQ(load.calls, 4);
  loader.get("4", load.fn());
  EXPECT_EQ(loader.num_keys(), 5);
  loader.get("5", load.fn());
  loader.flush();
  EXPECT_EQ(loader.num_keys(), 6);
}

TEST(CacheLoader, ShardsKeysAcrossServersAndAnotherLoaderFindsThemAll) {
  auto a = start_test_server();
  auto b = start_test_server();
  std::vector<std::string> warnings;
  CacheOptions options = loader_options({a.get(), b.get()}, "shard", &warnings, 16);
  // Each test server has its own password: give b a's too.
  connect_to(*b)->command({"CONFIG", "SET", "requirepass", a->password()});
  CountingLoad load;
  {
    CacheLoader loader(options);
    std::vector<std::string> keys;
    for (int i = 0; i < 200; ++i) keys.push_back(std::to_string(i));
    loader.get_many(keys, load.fn());
  }  // the destructor flushes
  EXPECT_EQ(load.calls, 200);
  store::RedisStore on_a({a->host()}, a->password(), std::chrono::milliseconds(1000));
  store::RedisStore on_b({b->host()}, a->password(), std::chrono::milliseconds(1000));
  const int64_t keys_a = on_a.num_keys(), keys_b = on_b.num_keys();
  EXPECT_EQ(keys_a + keys_b, 200);
  EXPECT_GT(keys_a, 60) << "FNV-1a spreads the keys";
  EXPECT_GT(keys_b, 60);
  EXPECT_EQ(connect_to(*a)->command({"EXISTS", "shard_0"})->integer,
            store::shard_of("shard_0", 2) == 0 ? 1 : 0);

  CacheLoader second(options);
  for (int i = 0; i < 200; ++i) second.get(std::to_string(i), load.fn());
  EXPECT_EQ(load.calls, 200) << "every entry found where the first loader wrote it";
  EXPECT_TRUE(warnings.empty());
}

TEST(CacheLoader, ACorruptValueIsAMissWithOneWarning) {
  auto server = start_test_server();
  std::vector<std::string> warnings;
  CacheLoader loader(loader_options({server.get()}, "c", &warnings));
  CountingLoad load;
  loader.get("1", load.fn());
  loader.get("2", load.fn());
  auto raw = connect_to(*server);
  auto got = raw->command({"GET", "c_1"});
  std::string stored(got->str, got->len);
  stored.back() ^= 0x5a;  // one flipped byte: the CRC catches it
  raw->command({"SET", "c_1", stored});
  raw->command({"SET", "c_2", "short"});
  EXPECT_EQ(loader.get("1", load.fn()), "value of 1");
  EXPECT_EQ(loader.get("2", load.fn()), "value of 2");
  EXPECT_EQ(load.calls, 4);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("corrupt"), std::string::npos) << warnings[0];
  EXPECT_EQ(loader.get("1", load.fn()), "value of 1");
  EXPECT_EQ(load.calls, 4) << "the reloaded value was written back";
}

TEST(CacheLoader, AKilledServerMeansLoadFnForEveryKeyOneWarningAndNoRetryStorm) {
  auto server = start_test_server();
  std::vector<std::string> warnings;
  CacheOptions options = loader_options({server.get()}, "k", &warnings);
  options.retry_after = std::chrono::milliseconds(300);
  CacheLoader loader(options);
  CountingLoad load;
  loader.get("1", load.fn());
  const pid_t pid = server->pid();
  server->stop();
  ASSERT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH) << "stop() leaves no process";
  for (int i = 0; i < 50; ++i) EXPECT_EQ(loader.get("1", load.fn()), "value of 1");
  EXPECT_EQ(load.calls, 51);
  EXPECT_FALSE(loader.available());
  EXPECT_EQ(loader.num_keys(), -1);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("unavailable"), std::string::npos) << warnings[0];
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  loader.get("1", load.fn());  // one silent retry, which fails
  EXPECT_EQ(warnings.size(), 1u);
}

TEST(CacheLoader, NothingListeningIsAWarningNotAnError) {
  std::vector<std::string> warnings;
  CacheOptions options;
  options.dataset_name = "none";
  options.hosts = {{"127.0.0.1", find_free_port()}};
  options.warn = [&](const std::string& m) { warnings.push_back(m); };
  CacheLoader loader(options);
  CountingLoad load;
  EXPECT_EQ(loader.get("1", load.fn()), "value of 1");
  EXPECT_FALSE(loader.available());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("127.0.0.1:" + std::to_string(options.hosts[0].port)), std::string::npos) << warnings[0];
}

TEST(RedisServer, HasTheConfigItWasGivenAndNeedsItsPassword) {
  auto server = start_test_server(12345678);
  auto c = connect_to(*server);
  auto reply = c->command({"CONFIG", "GET", "maxmemory"});
  ASSERT_EQ(reply->elements, 2u);
  EXPECT_EQ(std::string(reply->element[1]->str), "12345678");
  reply = c->command({"CONFIG", "GET", "maxmemory-policy"});
  EXPECT_EQ(std::string(reply->element[1]->str), "allkeys-random");
  reply = c->command({"CONFIG", "GET", "save"});
  EXPECT_EQ(std::string(reply->element[1]->str), "");
  EXPECT_THROW(store::RedisConnection(server->host(), "", std::chrono::milliseconds(500)), store::StoreError);
  EXPECT_THROW(store::RedisConnection(server->host(), "wrong", std::chrono::milliseconds(500)), store::StoreError);
}

TEST(CheckRedisHosts, NamesEveryHostThatCannotBeUsed) {
  auto server = start_test_server();
  EXPECT_NO_THROW(check_redis_hosts({server->host()}, server->password()));
  const int closed = find_free_port();
  try {
    check_redis_hosts({server->host(), {"127.0.0.1", closed}}, server->password(), std::chrono::milliseconds(500));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(e.is_user_error());
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(closed)), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find(std::to_string(server->host().port) + ":"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_redis_hosts({server->host()}, "wrong"), Error);
}

}  // namespace
