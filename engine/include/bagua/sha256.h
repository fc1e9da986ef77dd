// SHA-256 (FIPS 180-4) of bytes and files, as lowercase hex: what
// `sha256sum` prints. Provenance (which recipe, model and data made a run)
// and pinned recipe bases are recorded with it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace bagua {

// Incremental: update() any number of times, then hex() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // The digest as 64 lowercase hex digits; the object is spent afterwards.
  std::string hex();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view bytes);

// The SHA-256 of a file's contents, read in pieces. Throws bagua::Error
// (a user error) naming the file when it cannot be read.
std::string sha256_file(const std::string& path);

// Like sha256_file(), but remembers each file's digest by its absolute
// path, device, inode, size, modification and change times in a small cache
// file (a file replaced by one of the same size and preserved modification
// time, as cp -p or rsync -a leave it, is hashed again), so a large data
// set is hashed once, not on every run. The cache is
// $BAGUA_HASH_CACHE, else $XDG_CACHE_HOME/bagua/file-sha256.json, else
// ~/.cache/bagua/file-sha256.json; one that cannot be read or written is
// ignored (the file is then hashed). `hashed`, when given, is set to true
// when the file was read rather than found in the cache; `before_hashing`,
// when given, is called with the file's size just before it is read.
std::string cached_file_sha256(const std::string& path, bool* hashed = nullptr,
                               const std::function<void(int64_t size)>& before_hashing = {});

}  // namespace bagua
