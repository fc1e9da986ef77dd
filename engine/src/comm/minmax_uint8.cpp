// MinMaxUInt8 (bagua/compression.h): argument checks, the CPU loop, and the
// dispatch to the CUDA kernel (minmax_uint8_cuda.cu) for CUDA tensors.
#include <bagua/compression.h>
#include <bagua/errors.h>

#include "common/minmax_layout.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#ifdef BAGUA_CUDA_KERNELS
#include "comm/minmax_uint8_cuda.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace bagua {
namespace {

using minmax_layout::Quant;
using minmax_layout::quant_of;
static_assert(MinMaxUInt8::kEps == minmax_layout::kEps && MinMaxUInt8::kHeaderBytes == minmax_layout::kHeaderBytes,
              "one format");

// rint (round half to even) without a libm call: below 2^23, adding 2^23
// leaves no fraction bits, so the FPU's default rounding does the work;
// from 2^23 up every float is an integer already. NaN stays NaN.
inline float round_even(float v) {
  constexpr float kTwo23 = 8388608.0f;
  const float a = std::fabs(v);
  const float r = (a + kTwo23) - kTwo23;
  return std::copysign(a < kTwo23 ? r : a, v);
}

// The byte of `x`; NaN compares false everywhere, so it lands on `upper`
// (255), as fminf does in the kernel.
inline uint8_t quantise(float x, const Quant& q) {
  float level = round_even(x * q.scale);
  level = level < q.upper ? level : q.upper;
  float byte = level - q.lower;
  byte = byte > 0.0f ? byte : 0.0f;
  byte = byte < 255.0f ? byte : 255.0f;
  return static_cast<uint8_t>(byte);
}

// GCC/Clang vector extensions: four floats per operation on any target
// (SSE, NEON), two sets of accumulators for instruction-level parallelism,
// and the comparison semantics written out, so a NaN is never picked as a
// minimum or maximum.
typedef float Floats4 __attribute__((vector_size(16)));
typedef int Ints4 __attribute__((vector_size(16)));

struct Scan {
  float lo, hi;
  bool non_finite;
};

// `out` extended by in[i, e), one value at a time (the loops' remainders).
inline Scan scan_tail(const float* in, int64_t i, int64_t e, Scan out) {
  for (; i < e; ++i) {
    const float x = in[i];
    out.lo = x < out.lo ? x : out.lo;
    out.hi = x > out.hi ? x : out.hi;
    out.non_finite = out.non_finite || !std::isfinite(x);
  }
  return out;
}

// Min and max of in[b, e), and whether any value is NaN or infinite.
Scan scan_range(const float* in, int64_t b, int64_t e) {
  const float inf = std::numeric_limits<float>::infinity();
  Floats4 lo0 = {inf, inf, inf, inf}, hi0 = {-inf, -inf, -inf, -inf};
  Floats4 lo1 = lo0, hi1 = hi0;
  Ints4 bad = {0, 0, 0, 0};
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    Floats4 x0, x1;
    std::memcpy(&x0, in + i, sizeof(x0));
    std::memcpy(&x1, in + i + 4, sizeof(x1));
    lo0 = x0 < lo0 ? x0 : lo0;
    hi0 = x0 > hi0 ? x0 : hi0;
    lo1 = x1 < lo1 ? x1 : lo1;
    hi1 = x1 > hi1 ? x1 : hi1;
    // x - x is 0 for finite values, NaN for NaN and +-inf.
    Floats4 z0 = x0 - x0, z1 = x1 - x1;
    bad |= (z0 != z0) | (z1 != z1);
  }
  Scan out{inf, -inf, false};
  for (int k = 0; k < 4; ++k) {
    const float lo = lo0[k] < lo1[k] ? lo0[k] : lo1[k];
    const float hi = hi0[k] > hi1[k] ? hi0[k] : hi1[k];
    out.lo = lo < out.lo ? lo : out.lo;
    out.hi = hi > out.hi ? hi : out.hi;
    out.non_finite = out.non_finite || bad[k] != 0;
  }
  return scan_tail(in, i, e, out);
}

// quantise() four values at a time, bit for bit: round_even on the vector
// (the sign put back from the bits), the same clamps in the same order, and
// a truncating conversion of values that are whole numbers in [0, 255].
inline Ints4 quantise4(Floats4 x, Floats4 scale, Floats4 upper, Floats4 lower) {
  const Floats4 two23 = {8388608.0f, 8388608.0f, 8388608.0f, 8388608.0f};
  const Floats4 zero = {0.0f, 0.0f, 0.0f, 0.0f}, top = {255.0f, 255.0f, 255.0f, 255.0f};
  const Ints4 sign_bit = {INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN};
  const Floats4 v = x * scale;
  const Ints4 bits = reinterpret_cast<Ints4>(v);
  const Floats4 a = reinterpret_cast<Floats4>(bits & ~sign_bit);
  const Floats4 r = (a + two23) - two23;
  const Floats4 magnitude = a < two23 ? r : a;
  Floats4 level = reinterpret_cast<Floats4>(reinterpret_cast<Ints4>(magnitude) | (bits & sign_bit));
  level = level < upper ? level : upper;
  Floats4 byte = level - lower;
  byte = byte > zero ? byte : zero;
  byte = byte < top ? byte : top;
  return __builtin_convertvector(byte, Ints4);
}

typedef short Shorts8 __attribute__((vector_size(16)));
typedef unsigned char Bytes16 __attribute__((vector_size(16)));

// data[i] = quantise(in[i]) for i in [b, e): sixteen values per iteration,
// their bytes packed from the low byte of each 32-bit lane.
void quantise_range(const float* in, int64_t b, int64_t e, const Quant& q, uint8_t* data) {
  const Floats4 scale = {q.scale, q.scale, q.scale, q.scale};
  const Floats4 upper = {q.upper, q.upper, q.upper, q.upper};
  const Floats4 lower = {q.lower, q.lower, q.lower, q.lower};
  int64_t i = b;
  for (; i + 16 <= e; i += 16) {
    Floats4 x[4];
    std::memcpy(x, in + i, sizeof(x));
    const Ints4 q0 = quantise4(x[0], scale, upper, lower), q1 = quantise4(x[1], scale, upper, lower);
    const Ints4 q2 = quantise4(x[2], scale, upper, lower), q3 = quantise4(x[3], scale, upper, lower);
    const Shorts8 lo = __builtin_shufflevector(reinterpret_cast<Shorts8>(q0), reinterpret_cast<Shorts8>(q1), 0, 2, 4,
                                               6, 8, 10, 12, 14);
    const Shorts8 hi = __builtin_shufflevector(reinterpret_cast<Shorts8>(q2), reinterpret_cast<Shorts8>(q3), 0, 2, 4,
                                               6, 8, 10, 12, 14);
    const Bytes16 bytes = __builtin_shufflevector(reinterpret_cast<Bytes16>(lo), reinterpret_cast<Bytes16>(hi), 0, 2,
                                                  4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    std::memcpy(data + i, &bytes, sizeof(bytes));
  }
  for (; i < e; ++i) data[i] = quantise(in[i], q);
}

// The same two loops for CPUs with AVX2 (eight floats per operation, and
// rint as one rounding instruction), picked at run time: 2x the portable
// loops' throughput on this project's machines (docs/benchmarks.md). The
// results are bitwise the portable loops' (rint rounds half to even, as
// round_even does).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BAGUA_MINMAX_AVX2 1
typedef float Floats8 __attribute__((vector_size(32)));
typedef int Ints8 __attribute__((vector_size(32)));

__attribute__((target("avx2"))) Scan scan_range_avx2(const float* in, int64_t b, int64_t e) {
  const float inf = std::numeric_limits<float>::infinity();
  Floats8 lo = {inf, inf, inf, inf, inf, inf, inf, inf};
  Floats8 hi = -lo;
  Ints8 bad = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    Floats8 x;
    std::memcpy(&x, in + i, sizeof(x));
    lo = x < lo ? x : lo;
    hi = x > hi ? x : hi;
    const Floats8 z = x - x;
    bad |= z != z;
  }
  Scan out{inf, -inf, false};
  for (int k = 0; k < 8; ++k) {
    out.lo = lo[k] < out.lo ? lo[k] : out.lo;
    out.hi = hi[k] > out.hi ? hi[k] : out.hi;
    out.non_finite = out.non_finite || bad[k] != 0;
  }
  return scan_tail(in, i, e, out);
}

__attribute__((target("avx2"))) void quantise_range_avx2(const float* __restrict in, int64_t b, int64_t e,
                                                         const Quant& quant, uint8_t* __restrict data) {
  const float scale = quant.scale, upper = quant.upper, lower = quant.lower;
  for (int64_t i = b; i < e; ++i) {  // vectorised by the compiler (this file is built with -O3)
    float level = std::rint(in[i] * scale);
    level = level < upper ? level : upper;
    float byte = level - lower;
    byte = byte > 0.0f ? byte : 0.0f;
    byte = byte < 255.0f ? byte : 255.0f;
    data[i] = static_cast<uint8_t>(static_cast<int>(byte));
  }
}
#endif

// Whether the AVX2 loops run (tests turn them off to check the portable ones).
bool& use_avx2() {
#ifdef BAGUA_MINMAX_AVX2
  static bool yes = __builtin_cpu_supports("avx2");
#else
  static bool yes = false;
#endif
  return yes;
}

Scan scan_fastest(const float* in, int64_t b, int64_t e) {
#ifdef BAGUA_MINMAX_AVX2
  if (use_avx2()) return scan_range_avx2(in, b, e);
#endif
  return scan_range(in, b, e);
}

void quantise_fastest(const float* in, int64_t b, int64_t e, const Quant& q, uint8_t* data) {
#ifdef BAGUA_MINMAX_AVX2
  if (use_avx2()) return quantise_range_avx2(in, b, e, q, data);
#endif
  quantise_range(in, b, e, q, data);
}

// One compressed chunk as dequantise_sum_range() reads it (a table
// lookup per value runs at memory speed, where a division per value held a
// vectorised loop at about 7 GB/s here).
using Source = minmax_layout::Levels;

// out[i] = ((accumulate ? out[i] : 0) + d_0[i] + d_1[i] + ...) [/ divisor],
// d_k[i] the decompressed value of source k, for i in [b, e): float32, the
// terms added in the order given. Beyond two sources, source by source
// over blocks small enough to stay in the L1 cache, so that every inner
// loop is one lookup and one add (`out += one source`, decompress_add, ran
// at a third of the speed with the loop over the sources inside the loop
// over values); each value still gets its terms in the same order.
// divisor 0 means none.
void dequantise_sum_range(const std::vector<Source>& sources, int64_t b, int64_t e, bool accumulate, float divisor,
                          float* out) {
  if (sources.size() == 1 && !accumulate && divisor == 0.0f) {
    const Source& s = sources[0];
    for (int64_t i = b; i < e; ++i) out[i] = s.value[s.bytes[i]];
    return;
  }
  if (sources.size() == 2 && !accumulate) {  // two ranks' scatter-reduce: one loop is faster still
    const Source &s = sources[0], &t = sources[1];
    for (int64_t i = b; i < e; ++i) {
      const float sum = (0.0f + s.value[s.bytes[i]]) + t.value[t.bytes[i]];
      out[i] = divisor != 0.0f ? sum / divisor : sum;
    }
    return;
  }
  constexpr int64_t kBlock = 2048;
  for (int64_t bb = b; bb < e; bb += kBlock) {
    const int64_t ee = std::min(e, bb + kBlock);
    size_t k = 0;
    if (!accumulate) {
      if (sources.empty()) {
        std::fill(out + bb, out + ee, 0.0f);
      } else {
        const Source& s = sources[0];
        for (int64_t i = bb; i < ee; ++i) out[i] = 0.0f + s.value[s.bytes[i]];
        k = 1;
      }
    }
    for (; k < sources.size(); ++k) {
      const Source& s = sources[k];
      for (int64_t i = bb; i < ee; ++i) out[i] += s.value[s.bytes[i]];
    }
    if (divisor != 0.0f) {
      for (int64_t i = bb; i < ee; ++i) out[i] /= divisor;
    }
  }
}

void compress_chunk_cpu(const float* in, int64_t n, int64_t padded, uint8_t* out) {
  constexpr int64_t kGrain = 1 << 15;
  const float inf = std::numeric_limits<float>::infinity();
  Scan scan = at::parallel_reduce(
      0, n, kGrain, Scan{inf, -inf, false},
      [&](int64_t b, int64_t e, Scan acc) {
        Scan part = scan_fastest(in, b, e);
        return Scan{part.lo < acc.lo ? part.lo : acc.lo, part.hi > acc.hi ? part.hi : acc.hi,
                    part.non_finite || acc.non_finite};
      },
      [](Scan a, Scan b) {
        return Scan{a.lo < b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi, a.non_finite || b.non_finite};
      });
  struct MinMax {
    float lo, hi;
  } mm{scan.lo, scan.hi};
  if (scan.non_finite) {
    mm.lo = mm.hi = std::numeric_limits<float>::quiet_NaN();  // marks the chunk: see the header comment
  } else if (!(mm.lo <= mm.hi)) {
    mm.lo = mm.hi = 0.0f;  // an empty chunk
  }
  const Quant q = quant_of(mm.lo, mm.hi);
  float header[MinMaxUInt8::kHeaderBytes / 4] = {mm.lo, mm.hi};
  std::memcpy(out, header, sizeof(header));
  uint8_t* data = out + MinMaxUInt8::kHeaderBytes;
  at::parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) { quantise_fastest(in, b, e, q, data); });
  std::memset(data + n, 0, static_cast<size_t>(padded - n));
}

// out = decompressed chunks (+ out when accumulate) [/ divisor]: the chunks
// are one-chunk compressed forms of n values each.
// `first`: the chunks' values from `first` on (out[0] gets value first).
void dequantise_chunks_cpu(const std::vector<const uint8_t*>& chunks, int64_t n, bool accumulate, float divisor,
                           float* out, int64_t first = 0) {
  std::vector<Source> sources;
  sources.reserve(chunks.size());
  for (const uint8_t* c : chunks) {
    sources.push_back(minmax_layout::levels_of(c));
    sources.back().bytes += first;
  }
  at::parallel_for(0, n, 1 << 15, [&](int64_t b, int64_t e) {
    dequantise_sum_range(sources, b, e, accumulate, divisor, out);
  });
}

void decompress_chunk_cpu(const uint8_t* in, int64_t n, float* out) { dequantise_chunks_cpu({in}, n, false, 0.0f, out); }

void check_chunks(int64_t chunks, const char* what) {
  if (chunks < 1) {
    throw InvalidArgument(std::string("MinMaxUInt8::") + what + ": chunks must be at least 1, got " +
                          std::to_string(chunks));
  }
}

// That `compressed` holds `numel` values in `chunks` chunks, as uint8 on
// `device`; else an InvalidArgument naming `what` (the function, and the
// part for decompress_sum) with what was expected and what came.
void check_compressed(const std::string& what, const at::Tensor& compressed, const at::Device& device, int64_t numel,
                      int64_t chunks) {
  const int64_t bytes = MinMaxUInt8::compressed_bytes(numel, chunks);
  if (compressed.defined() && compressed.scalar_type() == at::kByte && compressed.numel() == bytes &&
      compressed.device() == device) {
    return;
  }
  throw InvalidArgument("MinMaxUInt8::" + what + ": expected a uint8 tensor of " + std::to_string(bytes) +
                        " bytes on " + device.str() + " (" + std::to_string(numel) + " values in " +
                        std::to_string(chunks) + (chunks == 1 ? " chunk" : " chunks") + "), got " +
                        (compressed.defined() ? std::to_string(compressed.numel()) + " " +
                                                    c10::toString(compressed.scalar_type()) + " on " +
                                                    compressed.device().str()
                                              : std::string("an undefined tensor")));
}

bool is_float_like(const at::Tensor& t) {
  auto s = t.scalar_type();
  return s == at::kFloat || s == at::kHalf || s == at::kBFloat16;
}

}  // namespace

namespace comm {
// A seam for tests (declared there, not in a header): false makes compress()
// take the portable loops on a CPU with AVX2. Returns the previous setting.
bool minmax_uint8_use_avx2(bool on) {
  const bool was = use_avx2();
#ifdef BAGUA_MINMAX_AVX2
  use_avx2() = on && __builtin_cpu_supports("avx2");
#else
  (void)on;
#endif
  return was;
}
}  // namespace comm

int64_t MinMaxUInt8::chunk_numel(int64_t numel, int64_t chunks) {
  check_chunks(chunks, "chunk_numel");
  return minmax_layout::chunk_numel(numel, chunks);
}

int64_t MinMaxUInt8::chunk_stride(int64_t numel, int64_t chunks) {
  check_chunks(chunks, "chunk_numel");
  return minmax_layout::chunk_stride(numel, chunks);
}

int64_t MinMaxUInt8::compressed_bytes(int64_t numel, int64_t chunks) {
  check_chunks(chunks, "chunk_numel");
  return minmax_layout::compressed_bytes(numel, chunks);
}

void MinMaxUInt8::compress(const at::Tensor& input, at::Tensor& out, int64_t chunks) {
  check_chunks(chunks, "compress");
  if (!input.defined() || !is_float_like(input)) {
    throw InvalidArgument("MinMaxUInt8::compress: the input must be a float32, float16 or bfloat16 tensor, got " +
                          (input.defined() ? std::string(c10::toString(input.scalar_type())) : "undefined"));
  }
  const int64_t numel = input.numel();
  const int64_t bytes = compressed_bytes(numel, chunks);
  if (!out.defined() || out.scalar_type() != at::kByte || out.numel() != bytes || !out.is_contiguous() ||
      out.device() != input.device()) {
    throw InvalidArgument("MinMaxUInt8::compress: `out` must be a contiguous uint8 tensor of " +
                          std::to_string(bytes) + " bytes on " + input.device().str());
  }
  at::Tensor flat = input.reshape({-1}).to(at::kFloat).contiguous();
  const int64_t per = chunk_numel(numel, chunks);
  const int64_t stride = chunk_stride(numel, chunks);
  if (input.is_cuda()) {
#ifdef BAGUA_CUDA_KERNELS
    c10::cuda::CUDAGuard guard(input.device());
    at::Tensor scratch = at::empty({comm::cuda::minmax_uint8_scratch_floats(per, chunks)},
                                   flat.options());
    comm::cuda::minmax_uint8_compress(flat.data_ptr<float>(), numel, chunks, per, stride, out.data_ptr<uint8_t>(),
                                      scratch.data_ptr<float>(),
                                      c10::cuda::getCurrentCUDAStream(input.device().index()).stream());
    return;
#else
    // A CUDA LibTorch without CUDA kernels in this build: compress on the host.
    at::Tensor host = at::empty({bytes}, at::kByte);
    at::Tensor host_in = flat.cpu();
    compress(host_in, host, chunks);
    out.copy_(host);
    return;
#endif
  }
  if (!input.is_cpu()) {
    throw InvalidArgument("MinMaxUInt8::compress: tensors on " + input.device().str() + " are not supported");
  }
  const float* in = flat.data_ptr<float>();
  uint8_t* o = out.data_ptr<uint8_t>();
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = std::min(numel, c * per);
    const int64_t n = std::min(numel, begin + per) - begin;
    compress_chunk_cpu(in + begin, n, stride - kHeaderBytes, o + c * stride);
  }
}

at::Tensor MinMaxUInt8::compress(const at::Tensor& input, int64_t chunks) {
  check_chunks(chunks, "compress");
  at::Tensor out = at::empty({compressed_bytes(input.defined() ? input.numel() : 0, chunks)},
                             at::TensorOptions().dtype(at::kByte).device(input.defined() ? input.device()
                                                                                         : at::Device(at::kCPU)));
  compress(input, out, chunks);
  return out;
}

void MinMaxUInt8::decompress(const at::Tensor& compressed, at::Tensor& out, int64_t chunks) {
  check_chunks(chunks, "decompress");
  if (!out.defined() || !at::isFloatingType(out.scalar_type())) {
    throw InvalidArgument("MinMaxUInt8::decompress: `out` must be a floating-point tensor");
  }
  const int64_t numel = out.numel();
  check_compressed("decompress", compressed, out.device(), numel, chunks);
  at::Tensor src = compressed.contiguous();
  const bool direct = out.scalar_type() == at::kFloat && out.is_contiguous();
  at::Tensor target = direct ? out : at::empty({numel}, out.options().dtype(at::kFloat));
  const int64_t per = chunk_numel(numel, chunks);
  const int64_t stride = chunk_stride(numel, chunks);
  if (out.is_cuda()) {
#ifdef BAGUA_CUDA_KERNELS
    c10::cuda::CUDAGuard guard(out.device());
    comm::cuda::minmax_uint8_decompress(src.data_ptr<uint8_t>(), numel, chunks, per, stride,
                                        target.data_ptr<float>(),
                                        c10::cuda::getCurrentCUDAStream(out.device().index()).stream());
#else
    at::Tensor host = at::empty({numel}, at::kFloat);
    at::Tensor host_src = src.cpu();
    decompress(host_src, host, chunks);
    target.copy_(host);
#endif
  } else {
    if (!out.is_cpu()) {
      throw InvalidArgument("MinMaxUInt8::decompress: tensors on " + out.device().str() + " are not supported");
    }
    const uint8_t* in = src.data_ptr<uint8_t>();
    float* o = target.data_ptr<float>();
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = std::min(numel, c * per);
      const int64_t n = std::min(numel, begin + per) - begin;
      decompress_chunk_cpu(in + c * stride, n, o + begin);
    }
  }
  if (!direct) out.copy_(target.view(out.sizes()));
}

void MinMaxUInt8::decompress_add(const at::Tensor& compressed, at::Tensor& out, int64_t chunks) {
  check_chunks(chunks, "decompress_add");
  const bool plain = out.defined() && out.scalar_type() == at::kFloat && out.is_contiguous() && compressed.defined();
#ifdef BAGUA_CUDA_KERNELS
  if (plain && out.is_cuda() && compressed.is_cuda()) {  // one pass on the GPU
    const int64_t numel = out.numel();
    check_compressed("decompress_add", compressed, out.device(), numel, chunks);
    at::Tensor src = compressed.contiguous();
    const uint8_t* in = src.data_ptr<uint8_t>();
    c10::cuda::CUDAGuard guard(out.device());
    comm::cuda::minmax_uint8_dequantise_sum(&in, 1, numel, chunks, chunk_numel(numel, chunks),
                                            chunk_stride(numel, chunks), true, 0.0f, out.data_ptr<float>(),
                                            c10::cuda::getCurrentCUDAStream(out.device().index()).stream());
    return;
  }
#endif
  const bool fused = plain && out.is_cpu() && compressed.is_cpu();
  if (!fused) {
    at::Tensor scratch = at::empty(out.defined() ? out.sizes() : at::IntArrayRef{0},
                                   out.defined() ? out.options() : at::TensorOptions());
    decompress(compressed, scratch, chunks);
    out.add_(scratch);
    return;
  }
  const int64_t numel = out.numel();
  check_compressed("decompress_add", compressed, out.device(), numel, chunks);
  at::Tensor src = compressed.contiguous();
  const uint8_t* in = src.data_ptr<uint8_t>();
  float* o = out.data_ptr<float>();
  const int64_t per = chunk_numel(numel, chunks);
  const int64_t stride = chunk_stride(numel, chunks);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = std::min(numel, c * per);
    const int64_t n = std::min(numel, begin + per) - begin;
    dequantise_chunks_cpu({in + c * stride}, n, true, 0.0f, o + begin);
  }
}

void MinMaxUInt8::decompress_sum(const std::vector<at::Tensor>& parts, at::Tensor& out, bool average) {
  if (parts.empty()) throw InvalidArgument("MinMaxUInt8::decompress_sum: no parts");
  if (!out.defined() || !at::isFloatingType(out.scalar_type())) {
    throw InvalidArgument("MinMaxUInt8::decompress_sum: `out` must be a floating-point tensor");
  }
  const int64_t numel = out.numel();
  for (size_t k = 0; k < parts.size(); ++k) {
    check_compressed("decompress_sum: part " + std::to_string(k), parts[k], out.device(), numel, 1);
  }
  const auto n = static_cast<int64_t>(parts.size());
#ifdef BAGUA_CUDA_KERNELS
  if (out.is_cuda() && out.scalar_type() == at::kFloat && out.is_contiguous()) {  // one pass on the GPU
    std::vector<at::Tensor> held;  // contiguous parts, alive until the kernels are queued
    std::vector<const uint8_t*> sources;
    for (const auto& p : parts) {
      held.push_back(p.contiguous());
      sources.push_back(held.back().data_ptr<uint8_t>());
    }
    c10::cuda::CUDAGuard guard(out.device());
    comm::cuda::minmax_uint8_dequantise_sum(sources.data(), static_cast<int>(n), numel, 1, numel,
                                            chunk_stride(numel, 1), false, average ? static_cast<float>(n) : 0.0f,
                                            out.data_ptr<float>(),
                                            c10::cuda::getCurrentCUDAStream(out.device().index()).stream());
    return;
  }
#endif
  if (!out.is_cpu() || out.scalar_type() != at::kFloat || !out.is_contiguous()) {
    // Not the CPU's fused loop: decompress and add one part at a time.
    at::Tensor sum = at::zeros({numel}, out.options().dtype(at::kFloat));
    at::Tensor one = at::empty({numel}, sum.options());
    for (const auto& p : parts) {
      decompress(p, one, 1);
      sum.add_(one);
    }
    if (average) sum.div_(n);
    out.copy_(sum.view(out.sizes()));
    return;
  }
  std::vector<at::Tensor> held;  // contiguous parts, alive for the loop
  std::vector<const uint8_t*> chunks;
  for (const auto& p : parts) {
    held.push_back(p.contiguous());
    chunks.push_back(held.back().data_ptr<uint8_t>());
  }
  dequantise_chunks_cpu(chunks, numel, false, average ? static_cast<float>(n) : 0.0f, out.data_ptr<float>());
}

namespace {
void check_range(const char* what, const std::vector<at::Tensor>& parts, int64_t numel, int64_t begin,
                 const at::Tensor& out) {
  if (!out.defined() || !out.is_cpu() || out.scalar_type() != at::kFloat || !out.is_contiguous()) {
    throw InvalidArgument(std::string("MinMaxUInt8::") + what + ": `out` must be a contiguous float32 CPU tensor");
  }
  if (begin < 0 || begin + out.numel() > numel) {
    throw InvalidArgument(std::string("MinMaxUInt8::") + what + ": values [" + std::to_string(begin) + ", " +
                          std::to_string(begin + out.numel()) + ") are outside [0, " + std::to_string(numel) + ")");
  }
  for (size_t k = 0; k < parts.size(); ++k) {
    check_compressed(std::string(what) + ": part " + std::to_string(k), parts[k], out.device(), numel, 1);
  }
}
}  // namespace

void MinMaxUInt8::decompress_range(const at::Tensor& compressed, int64_t numel, int64_t begin, at::Tensor& out) {
  check_range("decompress_range", {compressed}, numel, begin, out);
  at::Tensor src = compressed.contiguous();
  dequantise_chunks_cpu({src.data_ptr<uint8_t>()}, out.numel(), false, 0.0f, out.data_ptr<float>(), begin);
}

void MinMaxUInt8::decompress_sum_range(const std::vector<at::Tensor>& parts, int64_t numel, int64_t begin,
                                       at::Tensor& out, bool average) {
  if (parts.empty()) throw InvalidArgument("MinMaxUInt8::decompress_sum_range: no parts");
  check_range("decompress_sum_range", parts, numel, begin, out);
  std::vector<at::Tensor> held;  // contiguous parts, alive for the loop
  std::vector<const uint8_t*> chunks;
  for (const auto& p : parts) {
    held.push_back(p.contiguous());
    chunks.push_back(held.back().data_ptr<uint8_t>());
  }
  const float divisor = average ? static_cast<float>(parts.size()) : 0.0f;
  dequantise_chunks_cpu(chunks, out.numel(), false, divisor, out.data_ptr<float>(), begin);
}

int64_t MinMaxUInt8::first_non_finite_chunk(const at::Tensor& compressed, int64_t numel, int64_t chunks) {
  check_chunks(chunks, "first_non_finite_chunk");
  const int64_t stride = chunk_stride(numel, chunks);
  if (!compressed.defined() || compressed.scalar_type() != at::kByte || compressed.numel() != chunks * stride) {
    throw InvalidArgument("MinMaxUInt8::first_non_finite_chunk: expected a uint8 tensor of " +
                          std::to_string(chunks * stride) + " bytes");
  }
  // The min of each chunk's header, as floats, on the host.
  at::Tensor mins = compressed.contiguous().view({chunks, stride}).narrow(1, 0, 4).cpu().contiguous();
  const uint8_t* p = mins.data_ptr<uint8_t>();
  for (int64_t c = 0; c < chunks; ++c) {
    float lo;
    std::memcpy(&lo, p + 4 * c, sizeof(float));
    if (std::isnan(lo)) return c;
  }
  return -1;
}

}  // namespace bagua
