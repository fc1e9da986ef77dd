// The byte layout of MinMaxUInt8's compressed form (bagua/compression.h),
// as plain arithmetic: the codec uses it, and so do the traffic models that
// predict what a compressed exchange sends (without LibTorch).
#pragma once

#include <cstdint>

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

}  // namespace bagua::minmax_layout
