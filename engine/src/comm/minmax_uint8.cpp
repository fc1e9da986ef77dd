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

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace bagua {
namespace {

struct Quant {
  float scale, upper, lower;
};

// The same operations, in the same order and precision, as the kernel.
Quant quant_of(float lo, float hi) {
  Quant q;
  q.scale = static_cast<float>(255.0 / static_cast<double>(hi - lo + MinMaxUInt8::kEps));
  q.upper = std::rint(hi * q.scale);
  q.lower = q.upper - 255.0f;
  return q;
}

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
  for (; i < e; ++i) {
    const float x = in[i];
    out.lo = x < out.lo ? x : out.lo;
    out.hi = x > out.hi ? x : out.hi;
    out.non_finite = out.non_finite || !std::isfinite(x);
  }
  return out;
}

void compress_chunk_cpu(const float* in, int64_t n, int64_t padded, uint8_t* out) {
  constexpr int64_t kGrain = 1 << 15;
  const float inf = std::numeric_limits<float>::infinity();
  Scan scan = at::parallel_reduce(
      0, n, kGrain, Scan{inf, -inf, false},
      [&](int64_t b, int64_t e, Scan acc) {
        Scan part = scan_range(in, b, e);
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
  at::parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) data[i] = quantise(in[i], q);
  });
  std::memset(data + n, 0, static_cast<size_t>(padded - n));
}

void decompress_chunk_cpu(const uint8_t* in, int64_t n, float* out) {
  float lo, hi;
  std::memcpy(&lo, in, sizeof(float));
  std::memcpy(&hi, in + sizeof(float), sizeof(float));
  const Quant q = quant_of(lo, hi);
  const uint8_t* data = in + MinMaxUInt8::kHeaderBytes;
  at::parallel_for(0, n, 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = (static_cast<float>(data[i]) + q.lower) / q.scale;
  });
}

void check_chunks(int64_t chunks, const char* what) {
  if (chunks < 1) {
    throw InvalidArgument(std::string("MinMaxUInt8::") + what + ": chunks must be at least 1, got " +
                          std::to_string(chunks));
  }
}

bool is_float_like(const at::Tensor& t) {
  auto s = t.scalar_type();
  return s == at::kFloat || s == at::kHalf || s == at::kBFloat16;
}

}  // namespace

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
  const int64_t bytes = compressed_bytes(numel, chunks);
  if (!compressed.defined() || compressed.scalar_type() != at::kByte || compressed.numel() != bytes ||
      compressed.device() != out.device()) {
    throw InvalidArgument("MinMaxUInt8::decompress: expected a uint8 tensor of " + std::to_string(bytes) +
                          " bytes on " + out.device().str() + " (" + std::to_string(numel) + " values in " +
                          std::to_string(chunks) + " chunks), got " +
                          (compressed.defined() ? std::to_string(compressed.numel()) + " " +
                                                      c10::toString(compressed.scalar_type()) + " on " +
                                                      compressed.device().str()
                                                : std::string("an undefined tensor")));
  }
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
