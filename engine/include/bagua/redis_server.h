// Redis servers for the dataset cache, as `bagua run`'s launcher needs them.
//
// RedisServer starts a private `redis-server` and owns it: its config
// (port, bind address, requirepass, maxmemory, maxmemory-policy
// allkeys-random, no RDB snapshots, no AOF) goes to the server on its stdin
// (`redis-server -`), never on its command line, so the password does not
// show in `ps`. The constructor returns once the server answers AUTH and
// PING; the destructor kills it (SIGKILL: nothing is persisted) and reaps
// it. The child also gets PR_SET_PDEATHSIG(SIGKILL), so it dies with the
// thread that started it even when that process is killed outright, and it
// runs in a process group of its own, so a Ctrl-C at the terminal reaches
// only bagua, which then stops it in order.
//
// check_redis_hosts() is the launcher's check of existing servers: each
// one is connected to, authenticated and pinged, within a short timeout.
#pragma once

#include <bagua/recipe_spec.h>

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace bagua {

// The workers read the cache's password from here (for servers listed in
// data.cache.hosts, set it yourself; for spawned ones bagua run does).
inline constexpr const char* kRedisPasswordEnv = "BAGUA_REDIS_PASSWORD";
// bagua run tells its workers where the server it spawned listens:
// "HOST:PORT".
inline constexpr const char* kRedisHostsEnv = "BAGUA_REDIS_HOSTS";

struct RedisServerOptions {
  std::string executable = "redis-server";  // looked up in PATH
  std::string bind = "127.0.0.1";
  int port = 0;                  // 0: a free port
  std::string password;          // requirepass; empty: none
  int64_t maxmemory = 100000000;  // bytes
  std::string log_path;          // its output; empty: discarded
  std::chrono::milliseconds start_timeout{10000};
};

class RedisServer {
 public:
  // Starts the server and waits until it answers. Throws a user Error
  // naming the executable when it cannot be run, and one quoting its log
  // when it exits or does not answer in time (after two more tries on other
  // free ports, when the port was picked here).
  explicit RedisServer(RedisServerOptions options);
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // Kills and reaps the server now (the destructor's work); idempotent.
  void stop();

  CacheHost host() const { return {options_.bind, port_}; }
  pid_t pid() const { return pid_; }
  const std::string& password() const { return options_.password; }

 private:
  bool start_once(int port, std::string* failure);
  RedisServerOptions options_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// 32 random hex digits (from getrandom), for requirepass.
std::string random_secret();

// Connects to each host (AUTH `password` when not empty, PING), each within
// `timeout`. Throws a user Error naming every host:port that failed and why.
void check_redis_hosts(const std::vector<CacheHost>& hosts, const std::string& password,
                       std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));

}  // namespace bagua
