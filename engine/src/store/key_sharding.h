// Which server of a sharded store holds a key: FNV-1a 64 of the key's
// bytes, modulo the number of servers. Stable across processes, runs,
// machines and compilers (unlike std::hash), so every worker of every run
// finds an entry where another wrote it, as long as the host list is the
// same and in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace bagua::store {

// 64-bit FNV-1a.
inline uint64_t fnv1a_64(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// The shard of `key` among `shards` (>= 1).
inline size_t shard_of(std::string_view key, size_t shards) {
  return static_cast<size_t>(fnv1a_64(key) % shards);
}

}  // namespace bagua::store
