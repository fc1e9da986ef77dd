// The byte layout of MinMaxUInt8's compressed form (bagua/compression.h),
// and its quantisation's parameters, as plain arithmetic: the codec uses
// it, so do the traffic models that predict what a compressed exchange
// sends (without LibTorch), and so do loops that fuse decompression with
// other work (low_precision_decentralized's).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace bagua::minmax_layout {

// Bytes of a chunk's header: its minimum and maximum as float32, then zeros.
constexpr int64_t kHeaderBytes = 32;

// ceil(numel / chunks) values per chunk (the last may hold fewer). chunks >= 1.
constexpr int64_t chunk_numel(int64_t numel, int64_t chunks) { return (numel + chunks - 1) / chunks; }

// Bytes from one chunk's start to the next: its header, then its quantised
// bytes zero-padded to a multiple of 32.
constexpr int64_t chunk_stride(int64_t numel, int64_t chunks) {
  return kHeaderBytes + (chunk_numel(numel, chunks) + 31) / 32 * 32;
}

// The whole compressed form: chunks * chunk_stride.
constexpr int64_t compressed_bytes(int64_t numel, int64_t chunks) { return chunks * chunk_stride(numel, chunks); }

// A chunk's quantisation, from its minimum and maximum (the formula in
// bagua/compression.h), in the same operations, order and precision as
// the CUDA kernel.
struct Quant {
  float scale, upper, lower;
};
constexpr float kEps = 1e-7f;
inline Quant quant_of(float lo, float hi) {
  Quant q;
  q.scale = static_cast<float>(255.0 / static_cast<double>(hi - lo + kEps));
  q.upper = std::rint(hi * q.scale);
  q.lower = q.upper - 255.0f;
  return q;
}

// One compressed chunk as a decompressing loop reads it: its quantised
// bytes, and what each of the 256 byte values decompresses to, (b + lower)
// / scale, worked out once. A table lookup gives the division's bits
// without a division per value. `chunk` points at the chunk's header.
struct Levels {
  const uint8_t* bytes;
  float value[256];
};
inline Levels levels_of(const uint8_t* chunk) {
  float lo, hi;
  std::memcpy(&lo, chunk, sizeof(float));
  std::memcpy(&hi, chunk + sizeof(float), sizeof(float));
  const Quant q = quant_of(lo, hi);
  Levels l;
  l.bytes = chunk + kHeaderBytes;
  for (int b = 0; b < 256; ++b) l.value[b] = (static_cast<float>(b) + q.lower) / q.scale;
  return l;
}

}  // namespace bagua::minmax_layout
