// zlib's CRC-32 (as Python's zlib.crc32) over any number of bytes. zlib's
// crc32() takes a 32-bit length, and LibTorch writes each tensor record of
// an archive in one call, so a record of 4 GiB or more must be summed in
// pieces: this does, `piece` bytes at a time (at most 2^32 - 1).
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace bagua::train {

inline uint32_t crc32_update(uint32_t crc, const void* data, size_t n, size_t piece = size_t{1} << 30) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  while (n > 0) {
    const size_t take = std::min(n, piece);
    c = ::crc32(c, p, static_cast<uInt>(take));
    p += take;
    n -= take;
  }
  return static_cast<uint32_t>(c);
}

// The CRC-32 of nothing, to start from.
inline uint32_t crc32_initial() { return static_cast<uint32_t>(::crc32(0L, Z_NULL, 0)); }

}  // namespace bagua::train
