// MinMaxUInt8: Bagua's 8-bit min-max quantisation, the compression under
// the low-precision algorithms (bytegrad, low_precision_decentralized).
//
// A flat float tensor of n values is cut into `chunks` chunks of
// chunk_numel(n, chunks) = ceil(n / chunks) values (the last may be
// shorter). Each chunk is quantised on its own, with Bagua's formula:
//
//   scale = 255 / (max - min + 1e-7)          (the division in double)
//   upper = rint(max * scale),  lower = upper - 255
//   q     = min(rint(x * scale), upper) - lower, saturated to [0, 255]
//   x'    = (q + lower) / scale                            (decompressed)
//
// so |x' - x| <= 0.5 / scale, about (max - min) / 510 (rint rounds half to
// even, which can push the minimum one step below `lower`: the saturation
// keeps it at 0, as CUDA's float-to-byte conversion in Bagua's kernel does).
//
// Non-finite input: a chunk holding a NaN or an infinity is marked, not
// quantised: its header's min and max are NaN, its bytes zero, and it
// decompresses to NaNs. first_non_finite_chunk() finds such chunks from the
// headers alone. ByteGrad and QAdam pass marked chunks on, so a NaN on one
// rank arrives as NaN on every rank alike, and `bagua run`'s
// train.on_nonfinite names the rank and stops, or skips the step.
//
// Layout of the compressed bytes: chunk c starts at c * chunk_stride(n,
// chunks) and holds a 32-byte header (min and max as float32, then zeros)
// followed by its chunk_numel quantised bytes, zero-padded to a multiple of
// 32. Chunks are independent: a chunk's bytes, sliced out, are a valid
// one-chunk compressed tensor of that chunk's values, so the chunks can be
// scattered to different ranks (ByteGrad's scatter-reduce does that).
//
// Inputs: float32, float16 or bfloat16, CPU or CUDA; the result is on the
// input's device. CPU work is a vectorised loop over threads (GCC vector
// extensions, four floats per operation); CUDA builds run a fused kernel
// (one pass for min/max, one to quantise) on the current stream. The CPU
// and CUDA results are bitwise identical.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace bagua {

class MinMaxUInt8 {
 public:
  static constexpr int64_t kHeaderBytes = 32;  // = minmax_layout::kHeaderBytes (engine/src/common/minmax_layout.h)
  static constexpr float kEps = 1e-7f;

  // Values per chunk: ceil(numel / chunks); 0 when numel is 0.
  static int64_t chunk_numel(int64_t numel, int64_t chunks);
  // Bytes from one chunk's start to the next: header + data padded to 32.
  static int64_t chunk_stride(int64_t numel, int64_t chunks);
  // Size of the compressed form: chunks * chunk_stride.
  static int64_t compressed_bytes(int64_t numel, int64_t chunks);

  // Compresses `input` (any shape, contiguous or not; its values in
  // row-major order) into `out`, a uint8 tensor of compressed_bytes(
  // input.numel(), chunks) bytes on the input's device.
  static void compress(const at::Tensor& input, at::Tensor& out, int64_t chunks = 1);
  static at::Tensor compress(const at::Tensor& input, int64_t chunks = 1);

  // Decompresses `compressed` into `out` (out.numel() values, any floating
  // dtype, same device), which must be what compress() was given in size and
  // chunks. Throws InvalidArgument when the sizes do not match.
  static void decompress(const at::Tensor& compressed, at::Tensor& out, int64_t chunks = 1);

  // out += decompress(compressed): bitwise what decompress() into another
  // tensor followed by out.add_() gives. A contiguous float32 `out` on the
  // CPU takes one pass (each byte read once, `out` read and written once).
  static void decompress_add(const at::Tensor& compressed, at::Tensor& out, int64_t chunks = 1);

  // out = decompress(parts[0]) + decompress(parts[1]) + ..., divided by the
  // number of parts when `average`; each part is a one-chunk compressed form
  // of out.numel() values. The terms are added in float32 in the order given,
  // starting from zero: bitwise what decompressing each and adding them in
  // turn gives. A contiguous float32 `out` on the CPU takes one pass that
  // reads every part's bytes once and writes `out` once (the low-precision
  // scatter-reduce of ByteGrad and QAdam).
  static void decompress_sum(const std::vector<at::Tensor>& parts, at::Tensor& out, bool average);

  // decompress() and decompress_sum() of a range of values only, for
  // consuming a compressed exchange piece by piece as its bytes land: `out`
  // (float32, contiguous, on the CPU) receives values [begin, begin +
  // out.numel()) of one-chunk compressed forms of `numel` values, bitwise
  // what the whole call gives there. Only each form's header and the
  // range's bytes are read.
  static void decompress_range(const at::Tensor& compressed, int64_t numel, int64_t begin, at::Tensor& out);
  static void decompress_sum_range(const std::vector<at::Tensor>& parts, int64_t numel, int64_t begin,
                                   at::Tensor& out, bool average);

  // The index of the first chunk of `compressed` (numel values in `chunks`
  // chunks) that held a NaN or an infinity, or -1 when none did. Reads only
  // the headers (for a CUDA tensor: a copy of chunks x 8 bytes to the host,
  // which waits for the compression).
  static int64_t first_non_finite_chunk(const at::Tensor& compressed, int64_t numel, int64_t chunks = 1);
};

}  // namespace bagua
