// Several Redis servers as one key-value store: each key lives on the
// server key_sharding.h names. Batched reads and writes send one command
// to every server concerned before reading any reply. Any failure throws
// StoreError (the store is then not used again: CacheLoader makes a new
// one when it retries).
#pragma once

#include "store/redis_connection.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bagua::store {

class RedisStore {
 public:
  // Connects to every host (in order; the order decides the sharding).
  RedisStore(const std::vector<CacheHost>& hosts, const std::string& password, std::chrono::milliseconds timeout);

  // The value of each key, nullopt where there is none (MGET per server).
  std::vector<std::optional<std::string>> get_many(const std::vector<std::string>& keys);
  // Sets every key (MSET per server).
  void set_many(const std::vector<std::pair<std::string, std::string>>& entries);
  // DBSIZE, summed over the servers.
  int64_t num_keys();
  // Deletes the keys matching the glob `pattern` on every server; returns
  // how many there were.
  int64_t remove_matching(const std::string& pattern);

  size_t num_servers() const { return connections_.size(); }
  const std::string& endpoint(size_t shard) const { return connections_.at(shard)->endpoint(); }

 private:
  std::vector<std::unique_ptr<RedisConnection>> connections_;
};

}  // namespace bagua::store
