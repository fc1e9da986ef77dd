// MinMaxUInt8 on the GPU (see bagua/compression.h for the format).
//
// compress: pass 1 gives each (chunk, block) a partial min/max (and whether
// it saw a NaN or an infinity) in scratch;
// pass 2 lets every block of a chunk fold its chunk's partials (a few
// hundred floats, in shared memory), then quantise its share of the chunk.
// decompress, and its fused sums (decompress_add, decompress_sum): one
// pass over the values, whatever the number of sources up to 8. Arithmetic matches the CPU loop operation for
// operation (float multiply, rintf, the scale's division in double), so both
// give the same bytes.
#include "comm/minmax_uint8_cuda.h"

#include <cuda_runtime.h>

#include <cstdint>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace bagua::comm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kHeaderBytes = 32;
constexpr float kEps = 1e-7f;
constexpr int kSlot = 3;  // scratch floats per (chunk, block): min, max, non-finite seen

// Blocks per chunk: enough to fill the GPU, each with a few thousand values.
int blocks_per_chunk(int64_t chunk_numel, int64_t chunks) {
  const int64_t by_work = (chunk_numel + kThreads * 16 - 1) / (kThreads * 16);
  const int64_t by_grid = std::max<int64_t>(1, 2048 / std::max<int64_t>(1, chunks));
  return static_cast<int>(std::max<int64_t>(1, std::min(by_work, by_grid)));
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("MinMaxUInt8 CUDA ") + what + ": " + cudaGetErrorString(e));
  }
}

// Block-wide fmin/fmax of (lo, hi); every thread gets the result.
__device__ void block_min_max(float& lo, float& hi) {
  __shared__ float s_lo[kWarps], s_hi[kWarps];
  for (int offset = 16; offset > 0; offset >>= 1) {
    lo = fminf(lo, __shfl_down_sync(0xffffffffu, lo, offset));
    hi = fmaxf(hi, __shfl_down_sync(0xffffffffu, hi, offset));
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    s_lo[warp] = lo;
    s_hi[warp] = hi;
  }
  __syncthreads();
  lo = s_lo[0];
  hi = s_hi[0];
  for (int w = 1; w < kWarps; ++w) {
    lo = fminf(lo, s_lo[w]);
    hi = fmaxf(hi, s_hi[w]);
  }
  __syncthreads();
}

struct Quant {
  float scale, upper, lower;
};

__device__ Quant quant_of(float lo, float hi) {
  Quant q;
  q.scale = static_cast<float>(255.0 / static_cast<double>(hi - lo + kEps));
  q.upper = rintf(hi * q.scale);
  q.lower = q.upper - 255.0f;
  return q;
}

__global__ void partial_min_max(const float* __restrict__ in, int64_t numel, int64_t chunk_numel,
                                int per_chunk, float* __restrict__ scratch) {
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * chunk_numel;
  const int64_t end = min(begin + chunk_numel, numel);
  float lo = INFINITY, hi = -INFINITY;
  int bad = 0;  // a NaN or an infinity seen
  const int64_t step = static_cast<int64_t>(per_chunk) * kThreads;
  for (int64_t i = begin + static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < end; i += step) {
    const float x = in[i];
    lo = fminf(lo, x);
    hi = fmaxf(hi, x);
    bad |= !isfinite(x);
  }
  bad = __syncthreads_or(bad);
  block_min_max(lo, hi);
  if (threadIdx.x == 0) {
    float* slot = scratch + kSlot * (chunk * per_chunk + blockIdx.x);
    slot[0] = lo;
    slot[1] = hi;
    slot[2] = bad ? 1.0f : 0.0f;
  }
}

__global__ void quantise(const float* __restrict__ in, int64_t numel, int64_t chunk_numel, int64_t stride,
                         int per_chunk, const float* __restrict__ scratch, uint8_t* __restrict__ out) {
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * chunk_numel;
  const int64_t end = min(begin + chunk_numel, numel);
  float lo = INFINITY, hi = -INFINITY;
  int bad = 0;
  for (int b = threadIdx.x; b < per_chunk; b += kThreads) {
    const float* slot = scratch + kSlot * (chunk * per_chunk + b);
    lo = fminf(lo, slot[0]);
    hi = fmaxf(hi, slot[1]);
    bad |= slot[2] != 0.0f;
  }
  bad = __syncthreads_or(bad);
  block_min_max(lo, hi);
  if (bad) {
    lo = hi = __int_as_float(0x7fc00000);  // the CPU's quiet NaN: marks the chunk
  } else if (!(lo <= hi)) {
    lo = hi = 0.0f;  // an empty chunk
  }
  const Quant q = quant_of(lo, hi);
  uint8_t* header = out + chunk * stride;
  if (blockIdx.x == 0 && threadIdx.x < kHeaderBytes / 4) {
    float v = threadIdx.x == 0 ? lo : (threadIdx.x == 1 ? hi : 0.0f);
    reinterpret_cast<float*>(header)[threadIdx.x] = v;
  }
  uint8_t* data = header + kHeaderBytes;
  const int64_t padded = stride - kHeaderBytes;
  const int64_t step = static_cast<int64_t>(per_chunk) * kThreads;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; j < padded; j += step) {
    uint8_t byte = 0;
    if (begin + j < end) {
      const float level = fminf(rintf(in[begin + j] * q.scale), q.upper);
      byte = static_cast<uint8_t>(fminf(fmaxf(level - q.lower, 0.0f), 255.0f));
    }
    data[j] = byte;
  }
}

constexpr int kMaxSources = 8;  // compressed sources one launch adds

// The sources of one dequantise_sum launch: each points at its chunk 0's
// header (chunk c's at + c * stride).
struct Sources {
  const uint8_t* at[kMaxSources];
  int count;
};

// How a launch starts each value: as source 0's value (a plain decompress,
// one source), as 0.0f + source 0's value (a sum, as the CPU loop adds),
// or as what `out` holds (accumulate).
enum Start : int { kFirstValue = 0, kFromZero = 1, kFromOut = 2 };

// out[i] = start + v_0[i] + v_1[i] + ... [/ divisor] over chunk blockIdx.y,
// the terms added in the CPU loop's order, each v_k[i] looked up in a
// 256-entry table of the chunk's levels, (b + lower) / scale, built in
// shared memory as the CPU builds its own: the same bits. kVec: four values
// per thread (a 4-byte load per source, a 16-byte store), for callers that
// checked the alignment (sources at 4 bytes, out and every chunk's first
// value at 16).
template <bool kVec>
__global__ void dequantise_sum(Sources src, int64_t numel, int64_t chunk_numel, int64_t stride, int start,
                               float divisor, float* __restrict__ out) {
  __shared__ float table[kMaxSources][256];
  __shared__ float s_scale[kMaxSources], s_lower[kMaxSources];
  const int64_t chunk = blockIdx.y;
  if (threadIdx.x < src.count) {
    const float* header = reinterpret_cast<const float*>(src.at[threadIdx.x] + chunk * stride);
    const Quant q = quant_of(header[0], header[1]);
    s_scale[threadIdx.x] = q.scale;
    s_lower[threadIdx.x] = q.lower;
  }
  __syncthreads();
  for (int t = threadIdx.x; t < src.count * 256; t += blockDim.x) {
    const int k = t >> 8, b = t & 255;
    table[k][b] = (static_cast<float>(b) + s_lower[k]) / s_scale[k];
  }
  __syncthreads();
  const int64_t begin = chunk * chunk_numel;
  const int64_t n = min(chunk_numel, numel - begin);  // values in this chunk
  if (n <= 0) return;
  float* o = out + begin;
  const int64_t offset = chunk * stride + kHeaderBytes;
  auto one = [&](int64_t i) {
    float acc = start == kFromOut ? o[i] : 0.0f;
    for (int k = 0; k < src.count; ++k) {
      const float v = table[k][src.at[k][offset + i]];
      acc = (k == 0 && start == kFirstValue) ? v : acc + v;
    }
    o[i] = divisor != 0.0f ? acc / divisor : acc;
  };
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (!kVec) {
    for (int64_t i = first; i < n; i += threads) one(i);
    return;
  }
  const int64_t groups = n / 4;
  for (int64_t g = first; g < groups; g += threads) {
    float4 acc = start == kFromOut ? reinterpret_cast<const float4*>(o)[g] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int k = 0; k < src.count; ++k) {
      const uchar4 b = reinterpret_cast<const uchar4*>(src.at[k] + offset)[g];
      const float* t = table[k];
      if (k == 0 && start == kFirstValue) {
        acc = make_float4(t[b.x], t[b.y], t[b.z], t[b.w]);
      } else {
        acc.x += t[b.x];
        acc.y += t[b.y];
        acc.z += t[b.z];
        acc.w += t[b.w];
      }
    }
    if (divisor != 0.0f) {
      acc.x /= divisor;
      acc.y /= divisor;
      acc.z /= divisor;
      acc.w /= divisor;
    }
    reinterpret_cast<float4*>(o)[g] = acc;
  }
  if (first < n - groups * 4) one(groups * 4 + first);  // the last 0-3 values
}

}  // namespace

int64_t minmax_uint8_scratch_floats(int64_t chunk_numel, int64_t chunks) {
  return kSlot * chunks * blocks_per_chunk(chunk_numel, chunks);
}

void minmax_uint8_compress(const float* in, int64_t numel, int64_t chunks, int64_t chunk_numel, int64_t stride,
                           uint8_t* out, float* scratch, void* stream) {
  if (chunks <= 0 || chunks > 65535) throw std::runtime_error("MinMaxUInt8 CUDA: chunks must be in [1, 65535]");
  auto s = static_cast<cudaStream_t>(stream);
  const int per_chunk = blocks_per_chunk(chunk_numel, chunks);
  const dim3 grid(per_chunk, static_cast<unsigned>(chunks));
  partial_min_max<<<grid, kThreads, 0, s>>>(in, numel, chunk_numel, per_chunk, scratch);
  check(cudaGetLastError(), "min/max launch");
  quantise<<<grid, kThreads, 0, s>>>(in, numel, chunk_numel, stride, per_chunk, scratch, out);
  check(cudaGetLastError(), "quantise launch");
}

void minmax_uint8_decompress(const uint8_t* in, int64_t numel, int64_t chunks, int64_t chunk_numel, int64_t stride,
                             float* out, void* stream) {
  minmax_uint8_dequantise_sum(&in, 1, numel, chunks, chunk_numel, stride, false, 0.0f, out, stream);
}

void minmax_uint8_dequantise_sum(const uint8_t* const* sources, int count, int64_t numel, int64_t chunks,
                                 int64_t chunk_numel, int64_t stride, bool accumulate, float divisor, float* out,
                                 void* stream) {
  if (chunks <= 0 || chunks > 65535) throw std::runtime_error("MinMaxUInt8 CUDA: chunks must be in [1, 65535]");
  if (count < 1) throw std::runtime_error("MinMaxUInt8 CUDA: no sources to decompress");
  if (numel == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  const int per_chunk = blocks_per_chunk(chunk_numel, chunks);
  const dim3 grid(per_chunk, static_cast<unsigned>(chunks));
  bool vec = reinterpret_cast<uintptr_t>(out) % 16 == 0 && (chunks == 1 || chunk_numel % 4 == 0);
  for (int k = 0; k < count; ++k) vec = vec && reinterpret_cast<uintptr_t>(sources[k]) % 4 == 0;
  // Up to kMaxSources per launch; a later launch adds to what the earlier
  // left, the divisor applied by the last: each value's terms in order.
  for (int first = 0; first < count; first += kMaxSources) {
    Sources src{};
    src.count = std::min(kMaxSources, count - first);
    for (int k = 0; k < src.count; ++k) src.at[k] = sources[first + k];
    const bool last = first + src.count == count;
    int start = kFromOut;
    if (first == 0 && !accumulate) start = (count == 1 && divisor == 0.0f) ? kFirstValue : kFromZero;
    const float d = last ? divisor : 0.0f;
    if (vec) {
      dequantise_sum<true><<<grid, kThreads, 0, s>>>(src, numel, chunk_numel, stride, start, d, out);
    } else {
      dequantise_sum<false><<<grid, kThreads, 0, s>>>(src, numel, chunk_numel, stride, start, d, out);
    }
    check(cudaGetLastError(), "dequantise launch");
  }
}

}  // namespace bagua::comm::cuda
