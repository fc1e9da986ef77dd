#include "store/redis_store.h"

#include "store/key_sharding.h"

#include <hiredis/hiredis.h>

namespace bagua::store {

RedisStore::RedisStore(const std::vector<CacheHost>& hosts, const std::string& password,
                       std::chrono::milliseconds timeout) {
  for (const auto& host : hosts) connections_.push_back(std::make_unique<RedisConnection>(host, password, timeout));
}

std::vector<std::optional<std::string>> RedisStore::get_many(const std::vector<std::string>& keys) {
  const size_t shards = connections_.size();
  // Per shard: the command, and where each of its replies goes.
  std::vector<std::vector<std::string>> commands(shards, std::vector<std::string>{"MGET"});
  std::vector<std::vector<size_t>> positions(shards);
  for (size_t i = 0; i < keys.size(); ++i) {
    const size_t shard = shard_of(keys[i], shards);
    commands[shard].push_back(keys[i]);
    positions[shard].push_back(i);
  }
  for (size_t s = 0; s < shards; ++s) {
    if (!positions[s].empty()) connections_[s]->append(commands[s]);
  }
  std::vector<std::optional<std::string>> values(keys.size());
  for (size_t s = 0; s < shards; ++s) {
    if (positions[s].empty()) continue;
    Reply reply = connections_[s]->read_reply();
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != positions[s].size())
      throw StoreError(connections_[s]->endpoint() + ": MGET answered with an unexpected reply");
    for (size_t j = 0; j < reply->elements; ++j) {
      const redisReply* element = reply->element[j];
      if (element->type == REDIS_REPLY_STRING) values[positions[s][j]] = std::string(element->str, element->len);
    }
  }
  return values;
}

void RedisStore::set_many(const std::vector<std::pair<std::string, std::string>>& entries) {
  const size_t shards = connections_.size();
  std::vector<std::vector<std::string>> commands(shards, std::vector<std::string>{"MSET"});
  for (const auto& [key, value] : entries) {
    auto& command = commands[shard_of(key, shards)];
    command.push_back(key);
    command.push_back(value);
  }
  for (size_t s = 0; s < shards; ++s) {
    if (commands[s].size() > 1) connections_[s]->append(commands[s]);
  }
  for (size_t s = 0; s < shards; ++s) {
    if (commands[s].size() > 1) connections_[s]->read_reply();
  }
}

int64_t RedisStore::num_keys() {
  int64_t total = 0;
  for (auto& connection : connections_) {
    Reply reply = connection->command({"DBSIZE"});
    if (reply->type != REDIS_REPLY_INTEGER) throw StoreError(connection->endpoint() + ": DBSIZE: unexpected reply");
    total += reply->integer;
  }
  return total;
}

int64_t RedisStore::remove_matching(const std::string& pattern) {
  int64_t removed = 0;
  for (auto& connection : connections_) {
    std::string cursor = "0";
    do {
      Reply reply = connection->command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 || reply->element[1]->type != REDIS_REPLY_ARRAY)
        throw StoreError(connection->endpoint() + ": SCAN: unexpected reply");
      cursor.assign(reply->element[0]->str, reply->element[0]->len);
      const redisReply* found = reply->element[1];
      if (found->elements == 0) continue;
      std::vector<std::string> command{"UNLINK"};
      for (size_t i = 0; i < found->elements; ++i)
        command.emplace_back(found->element[i]->str, found->element[i]->len);
      Reply count = connection->command(command);
      if (count->type == REDIS_REPLY_INTEGER) removed += count->integer;
    } while (cursor != "0");
  }
  return removed;
}

}  // namespace bagua::store
