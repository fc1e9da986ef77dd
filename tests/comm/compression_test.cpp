// MinMaxUInt8: literal values worked out by hand from Bagua's formula, a
// plain one-value-at-a-time reference for every byte, the error bound, the
// chunk layout, the fused decompress-and-add loops against the unfused
// sequence, bad arguments, and (GPU machines only) CUDA == CPU bitwise.
#include <bagua/compression.h>
#include <bagua/errors.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

namespace bagua::comm {
bool minmax_uint8_use_avx2(bool on);  // engine/src/comm/minmax_uint8.cpp's test seam
}

namespace {

using bagua::MinMaxUInt8;

// Bagua's formula, value by value, written independently of the library's
// loops: the expected bytes of one chunk (header included, unpadded).
std::vector<uint8_t> reference_chunk(const float* x, int64_t n) {
  float lo = 0, hi = 0;
  bool any = false;
  for (int64_t i = 0; i < n; ++i) {
    if (!any || x[i] < lo) lo = x[i];
    if (!any || x[i] > hi) hi = x[i];
    any = true;
  }
  std::vector<uint8_t> out(32 + n, 0);
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {  // a marked chunk: NaN header, zero bytes
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::memcpy(out.data(), &nan, 4);
      std::memcpy(out.data() + 4, &nan, 4);
      return out;
    }
  }
  std::memcpy(out.data(), &lo, 4);
  std::memcpy(out.data() + 4, &hi, 4);
  const float scale = static_cast<float>(255.0 / static_cast<double>(hi - lo + 1e-7f));
  const float upper = std::rint(hi * scale);
  const float lower = upper - 255.0f;
  for (int64_t i = 0; i < n; ++i) {
    float level = std::rint(x[i] * scale);
    if (level > upper) level = upper;
    // Saturating conversion to a byte, as CUDA's float -> uint8 does.
    float v = level - lower;
    out[32 + i] = static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
  }
  return out;
}

at::Tensor random_values(int64_t n, uint64_t seed) {
  at::manual_seed(seed);
  // A spread of magnitudes, like gradients: normal times a log-uniform scale.
  return at::randn({n}) * at::exp(at::rand({n}) * 6 - 5);
}

std::vector<uint8_t> bytes_of(const at::Tensor& t) {
  at::Tensor c = t.cpu().contiguous();
  return std::vector<uint8_t>(c.data_ptr<uint8_t>(), c.data_ptr<uint8_t>() + c.numel());
}

TEST(MinMaxUInt8, HandWorkedExamples) {
  // [0, 1]: scale = 255 / (1 + 1e-7) = 254.99997, upper = 255, lower = 0.
  auto a = bytes_of(MinMaxUInt8::compress(at::tensor({0.0f, 1.0f})));
  ASSERT_EQ(a.size(), 64u);
  EXPECT_EQ(a[32], 0);
  EXPECT_EQ(a[33], 255);
  // [-1, 0, 1]: 2 + 1e-7 rounds to 2.0f, so scale = 127.5 exactly; upper =
  // rint(127.5) = 128 (half to even), lower = -127. -1 -> rint(-127.5) = -128,
  // -128 + 127 = -1 saturates to 0; 0 -> 127; 1 -> 128 + 127 = 255.
  auto b = bytes_of(MinMaxUInt8::compress(at::tensor({-1.0f, 0.0f, 1.0f})));
  EXPECT_EQ(b[32], 0);
  EXPECT_EQ(b[33], 127);
  EXPECT_EQ(b[34], 255);
  float lo, hi;
  std::memcpy(&lo, b.data(), 4);
  std::memcpy(&hi, b.data() + 4, 4);
  EXPECT_EQ(lo, -1.0f);
  EXPECT_EQ(hi, 1.0f);
  // Padding and the rest of the header are zeros.
  for (int i = 8; i < 32; ++i) EXPECT_EQ(b[i], 0) << i;
  for (size_t i = 35; i < b.size(); ++i) EXPECT_EQ(b[i], 0) << i;
  // Decompressed: (q + lower) / scale.
  at::Tensor back = at::empty({3});
  MinMaxUInt8::decompress(MinMaxUInt8::compress(at::tensor({-1.0f, 0.0f, 1.0f})), back);
  EXPECT_EQ(back[0].item<float>(), -127.0f / 127.5f);
  EXPECT_EQ(back[1].item<float>(), 0.0f);
  EXPECT_EQ(back[2].item<float>(), 128.0f / 127.5f);
}

// Every byte against the reference, through the loops this CPU runs and,
// where it has AVX2, through the portable ones too.
class MinMaxUInt8Loops : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { was_ = bagua::comm::minmax_uint8_use_avx2(GetParam()); }
  void TearDown() override { bagua::comm::minmax_uint8_use_avx2(was_); }
  bool was_ = false;
};

TEST_P(MinMaxUInt8Loops, EveryByteMatchesTheReferenceForEverySizeAndChunking) {
  for (int64_t n : {0, 1, 2, 31, 32, 33, 1000, 100003}) {
    for (int64_t chunks : {1, 2, 3, 7}) {
      at::Tensor x = random_values(n, static_cast<uint64_t>(n * 10 + chunks));
      at::Tensor z = MinMaxUInt8::compress(x, chunks);
      const int64_t per = MinMaxUInt8::chunk_numel(n, chunks);
      const int64_t stride = MinMaxUInt8::chunk_stride(n, chunks);
      ASSERT_EQ(per, (n + chunks - 1) / chunks);
      ASSERT_EQ(stride % 32, 0);
      ASSERT_EQ(z.numel(), chunks * stride);
      auto got = bytes_of(z);
      for (int64_t c = 0; c < chunks; ++c) {
        int64_t begin = std::min(n, c * per), end = std::min(n, begin + per);
        auto want = reference_chunk(x.data_ptr<float>() + begin, end - begin);
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_EQ(got[c * stride + i], want[i]) << "n=" << n << " chunks=" << chunks << " chunk " << c
                                                  << " byte " << i;
        }
        for (int64_t i = static_cast<int64_t>(want.size()); i < stride; ++i) ASSERT_EQ(got[c * stride + i], 0);
      }
    }
  }
}

TEST(MinMaxUInt8, RoundTripErrorIsAtMostHalfAStepPerChunk) {
  const int64_t n = 50000, chunks = 4;
  at::Tensor x = random_values(n, 7);
  at::Tensor back = at::empty({n});
  MinMaxUInt8::decompress(MinMaxUInt8::compress(x, chunks), back, chunks);
  const int64_t per = MinMaxUInt8::chunk_numel(n, chunks);
  for (int64_t c = 0; c < chunks; ++c) {
    at::Tensor xs = x.narrow(0, c * per, per), bs = back.narrow(0, c * per, per);
    double range = (xs.max() - xs.min()).item<double>();
    double step = range / 255.0;
    double err = (xs - bs).abs().max().item<double>();
    EXPECT_LE(err, 0.5 * step * (1 + 1e-5) + 1e-6 * range) << "chunk " << c;
    EXPECT_GT(err, 0.0) << "8 bits cannot be lossless on random data";
  }
}

TEST(MinMaxUInt8, ChunksAreIndependentlyDecompressible) {
  const int64_t n = 1001, chunks = 3;
  at::Tensor x = random_values(n, 3);
  at::Tensor z = MinMaxUInt8::compress(x, chunks);
  at::Tensor all = at::empty({n});
  MinMaxUInt8::decompress(z, all, chunks);
  const int64_t per = MinMaxUInt8::chunk_numel(n, chunks), stride = MinMaxUInt8::chunk_stride(n, chunks);
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t len = std::min(per, n - c * per);
    at::Tensor one = at::empty({len});
    at::Tensor slice = z.narrow(0, c * stride, MinMaxUInt8::compressed_bytes(len, 1));
    MinMaxUInt8::decompress(slice, one, 1);
    EXPECT_TRUE(at::equal(one, all.narrow(0, c * per, len))) << "chunk " << c;
  }
}

TEST(MinMaxUInt8, ConstantAndZeroChunksComeBack) {
  at::Tensor back = at::empty({4});
  MinMaxUInt8::decompress(MinMaxUInt8::compress(at::zeros({4})), back);
  EXPECT_TRUE(at::equal(back, at::zeros({4})));
  MinMaxUInt8::decompress(MinMaxUInt8::compress(at::full({4}, 2.5f)), back);
  EXPECT_LT((back - 2.5f).abs().max().item<float>(), 1e-5f);
}

// Zero's code is exact: the zero-point (-lower) is an integer byte, so an
// exact 0 comes back as exactly 0 whatever else its chunk holds (only
// positive values, only negative ones, tiny or huge ranges); QAdam's frozen
// second moment and ByteGrad's dead units rely on it (docs/algorithms.md).
TEST(MinMaxUInt8, ExactZerosComeBackExactlyZeroInEveryKindOfChunk) {
  const int64_t n = 4099;
  for (int kind = 0; kind < 6; ++kind) {
    at::Tensor x = random_values(n, 11 + kind);
    if (kind == 1) x = x.abs() + 0.5f;              // positive only
    if (kind == 2) x = -(x.abs() + 0.5f);           // negative only
    if (kind == 3) x = x * 1e-30f;                  // tiny range
    if (kind == 4) x = x * 1e30f;                   // huge range
    if (kind == 5) x = (x.abs() + 1.0f) * 1e-20f;   // tiny and positive
    at::Tensor zero_at = at::rand({n}, at::TensorOptions().dtype(at::kFloat)) < 0.3;
    x.masked_fill_(zero_at, 0.0f);
    for (int64_t chunks : {1, 3, 8}) {
      at::Tensor back = at::empty({n});
      MinMaxUInt8::decompress(MinMaxUInt8::compress(x, chunks), back, chunks);
      EXPECT_EQ(back.masked_select(zero_at).abs().max().item<float>(), 0.0f)
          << "kind " << kind << ", " << chunks << " chunks";
    }
  }
}

TEST(MinMaxUInt8, NonFiniteChunksAreMarkedAndFoundNeverQuantised) {
  const int64_t n = 1000, chunks = 4;
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    at::Tensor x = random_values(n, 5);
    x[600] = bad;  // in chunk 2 (250 values per chunk)
    at::Tensor z = MinMaxUInt8::compress(x, chunks);
    EXPECT_EQ(MinMaxUInt8::first_non_finite_chunk(z, n, chunks), 2) << bad;
    at::Tensor back = at::empty({n});
    MinMaxUInt8::decompress(z, back, chunks);
    EXPECT_TRUE(back.narrow(0, 500, 250).isnan().all().item<bool>()) << "the marked chunk decompresses to NaN";
    EXPECT_TRUE(back.narrow(0, 0, 500).isfinite().all().item<bool>()) << "the other chunks are untouched";
    EXPECT_LT((back.narrow(0, 0, 500) - x.narrow(0, 0, 500)).abs().max().item<float>(), 0.1f);
  }
  EXPECT_EQ(MinMaxUInt8::first_non_finite_chunk(MinMaxUInt8::compress(random_values(n, 6), chunks), n, chunks), -1);
}

TEST(MinMaxUInt8, HalfAndBFloat16InputsQuantiseTheirFloatValues) {
  at::Tensor x = random_values(777, 11);
  for (auto dtype : {at::kHalf, at::kBFloat16}) {
    at::Tensor low = x.to(dtype);
    EXPECT_EQ(bytes_of(MinMaxUInt8::compress(low, 2)), bytes_of(MinMaxUInt8::compress(low.to(at::kFloat), 2)));
    at::Tensor back = at::empty({777}, dtype);
    MinMaxUInt8::decompress(MinMaxUInt8::compress(low, 2), back, 2);
    at::Tensor back_f = at::empty({777});
    MinMaxUInt8::decompress(MinMaxUInt8::compress(low.to(at::kFloat), 2), back_f, 2);
    EXPECT_TRUE(at::equal(back, back_f.to(dtype)));
  }
}

TEST(MinMaxUInt8, BadArgumentsAreClearErrors) {
  at::Tensor x = at::ones({10});
  at::Tensor small = at::empty({10}, at::kByte);
  EXPECT_THROW(MinMaxUInt8::compress(x, small, 1), bagua::InvalidArgument);
  EXPECT_THROW(MinMaxUInt8::compress(x, 0), bagua::InvalidArgument);
  EXPECT_THROW(MinMaxUInt8::compress(at::ones({4}, at::kLong)), bagua::InvalidArgument);
  at::Tensor z = MinMaxUInt8::compress(x, 2);
  at::Tensor wrong = at::empty({100});  // (11 would round to the same padded size)
  try {
    MinMaxUInt8::decompress(z, wrong, 2);
    FAIL() << "expected InvalidArgument";
  } catch (const bagua::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("100 values in 2 chunks"), std::string::npos) << e.what();
  }
}

// The quantising loop runs sixteen values at a time: values on and next to
// the half-way points between levels (where round-half-to-even decides),
// both signs, the saturated ends, and a length that leaves a scalar tail.
TEST_P(MinMaxUInt8Loops, VectorisedQuantisingMatchesTheReferenceOnTiesSignsAndEnds) {
  const float lo = -3.0f, hi = 5.0f;
  const float scale = static_cast<float>(255.0 / static_cast<double>(hi - lo + 1e-7f));
  std::vector<float> values{lo, hi, 0.0f, -0.0f};
  for (int level = -400; level <= 700; ++level) {
    const float half = (static_cast<float>(level) + 0.5f) / scale;
    values.push_back(half);
    values.push_back(std::nextafter(half, 1e9f));
    values.push_back(std::nextafter(half, -1e9f));
  }
  for (auto& v : values) v = std::min(hi, std::max(lo, v));
  values.push_back(lo);  // the clamp above keeps min and max exact
  values.push_back(hi);
  values.push_back(1.0f);
  at::Tensor x = at::tensor(values);
  ASSERT_NE(x.numel() % 16, 0) << "the scalar tail must be exercised too";
  auto got = bytes_of(MinMaxUInt8::compress(x, 1));
  auto want = reference_chunk(x.data_ptr<float>(), x.numel());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "byte " << i;
}

TEST_P(MinMaxUInt8Loops, ANonFiniteValueAnywhereMarksItsChunk) {
  for (int64_t n : {5, 8, 9, 33, 1000}) {
    for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
      for (float bad : {NAN, INFINITY, -INFINITY}) {
        at::Tensor x = random_values(n, static_cast<uint64_t>(n + at));
        x[at] = bad;
        EXPECT_EQ(MinMaxUInt8::first_non_finite_chunk(MinMaxUInt8::compress(x, 1), n, 1), 0)
            << "n=" << n << " at " << at << " value " << bad;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FastestAndPortable, MinMaxUInt8Loops, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Fastest" : "Portable";
                         });

// decompress_sum / decompress_add are one pass on the CPU; they must give
// the bits of the unfused sequence (decompress, add in order, divide).
TEST(MinMaxUInt8, FusedDecompressSumIsBitwiseTheLoopOfDecompressAndAdd) {
  for (int64_t n : {0, 1, 7, 8, 9, 1000, 100003}) {
    for (int parts : {1, 2, 3, 5}) {
      for (bool average : {false, true}) {
        std::vector<at::Tensor> packed;
        for (int k = 0; k < parts; ++k) {
          packed.push_back(MinMaxUInt8::compress(random_values(n, static_cast<uint64_t>(n * 31 + k)), 1));
        }
        at::Tensor want = at::zeros({n}), one = at::empty({n});
        for (const auto& p : packed) {
          MinMaxUInt8::decompress(p, one, 1);
          want.add_(one);
        }
        if (average) want.div_(parts);
        at::Tensor got = at::full({n}, 123.0f);  // overwritten, not added to
        MinMaxUInt8::decompress_sum(packed, got, average);
        ASSERT_TRUE(at::equal(got, want)) << "n=" << n << " parts=" << parts << " average=" << average;
        // Not float32: the unfused path, same values.
        at::Tensor as_double = at::empty({n}, at::kDouble);
        MinMaxUInt8::decompress_sum(packed, as_double, average);
        ASSERT_TRUE(at::equal(as_double.to(at::kFloat), want));
      }
    }
  }
}

TEST(MinMaxUInt8, FusedDecompressSumCarriesAMarkedPartAsNaN) {
  at::Tensor bad = random_values(40, 1);
  bad[17] = INFINITY;
  std::vector<at::Tensor> packed{MinMaxUInt8::compress(random_values(40, 2), 1), MinMaxUInt8::compress(bad, 1)};
  at::Tensor out = at::empty({40});
  MinMaxUInt8::decompress_sum(packed, out, true);
  EXPECT_TRUE(out.isnan().all().item<bool>()) << "a marked chunk decompresses to NaN, so every sum is NaN";
}

TEST(MinMaxUInt8, FusedDecompressAddIsBitwiseDecompressThenAdd) {
  for (int64_t n : {1, 15, 16, 17, 100003}) {
    for (int64_t chunks : {1, 3}) {
      at::Tensor z = MinMaxUInt8::compress(random_values(n, static_cast<uint64_t>(n + chunks)), chunks);
      at::Tensor base = random_values(n, 99);
      at::Tensor decoded = at::empty({n});
      MinMaxUInt8::decompress(z, decoded, chunks);
      at::Tensor want = base.clone().add_(decoded);
      at::Tensor got = base.clone();
      MinMaxUInt8::decompress_add(z, got, chunks);
      ASSERT_TRUE(at::equal(got, want)) << "n=" << n << " chunks=" << chunks;
      at::Tensor strided = at::zeros({n, 2}).select(1, 0);  // not contiguous: the unfused path
      strided.copy_(base);
      MinMaxUInt8::decompress_add(z, strided, chunks);
      ASSERT_TRUE(at::equal(strided, want));
    }
  }
}

// The ranged forms, which consume an exchange piece by piece: any range of
// values gets the bits the whole call gives there, and reads nothing
// outside the header and the range's bytes (the rest is poisoned here).
TEST(MinMaxUInt8, RangedDecompressionGivesTheWholeCallsBitsAndReadsOnlyItsBytes) {
  for (int64_t n : {1, 7, 100003}) {
    for (int parts : {1, 2, 3}) {
      std::vector<at::Tensor> packed;
      for (int k = 0; k < parts; ++k) {
        packed.push_back(MinMaxUInt8::compress(random_values(n, static_cast<uint64_t>(n * 7 + k)), 1));
      }
      at::Tensor whole_sum = at::empty({n}), whole = at::empty({n});
      MinMaxUInt8::decompress_sum(packed, whole_sum, true);
      MinMaxUInt8::decompress(packed[0], whole, 1);
      for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, n}, {0, 1}, {n / 3, n / 2 + 1}, {n - 1, n}, {n, n}}) {
        std::vector<at::Tensor> poisoned;
        for (const auto& p : packed) {
          at::Tensor q = p.clone();
          const int64_t h = MinMaxUInt8::kHeaderBytes;
          q.narrow(0, h, begin).fill_(0xAB);
          q.narrow(0, h + end, q.numel() - h - end).fill_(0xCD);
          poisoned.push_back(q);
        }
        at::Tensor sum = at::full({end - begin}, 7.0f), one = at::full({end - begin}, 7.0f);
        MinMaxUInt8::decompress_sum_range(poisoned, n, begin, sum, true);
        MinMaxUInt8::decompress_range(poisoned[0], n, begin, one);
        ASSERT_TRUE(at::equal(sum, whole_sum.narrow(0, begin, end - begin))) << n << " " << begin << " " << end;
        ASSERT_TRUE(at::equal(one, whole.narrow(0, begin, end - begin))) << n << " " << begin << " " << end;
      }
      at::Tensor past = at::empty({2});
      EXPECT_THROW(MinMaxUInt8::decompress_range(packed[0], n, n - 1, past), bagua::InvalidArgument);
      at::Tensor as_double = at::empty({1}, at::kDouble);
      EXPECT_THROW(MinMaxUInt8::decompress_sum_range(packed, n, 0, as_double, false), bagua::InvalidArgument);
    }
  }
}

TEST(MinMaxUInt8, FusedDecompressArgumentsAreChecked) {
  at::Tensor out = at::empty({10});
  std::vector<at::Tensor> parts{MinMaxUInt8::compress(at::ones({10}), 1), MinMaxUInt8::compress(at::ones({40}), 1)};
  try {
    MinMaxUInt8::decompress_sum(parts, out, false);
    FAIL() << "expected InvalidArgument";
  } catch (const bagua::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("part 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(MinMaxUInt8::decompress_sum({}, out, false), bagua::InvalidArgument);
  // One check, one message, for each of them: what was expected and what came.
  for (const std::string what : {"decompress", "decompress_add"}) {
    try {
      if (what == "decompress") MinMaxUInt8::decompress(MinMaxUInt8::compress(at::ones({40}), 1), out, 1);
      else MinMaxUInt8::decompress_add(MinMaxUInt8::compress(at::ones({40}), 1), out, 1);
      ADD_FAILURE() << what << ": no error";
    } catch (const bagua::InvalidArgument& e) {
      const std::string text = e.what();
      EXPECT_NE(text.find("MinMaxUInt8::" + what + ": expected a uint8 tensor of " +
                          std::to_string(MinMaxUInt8::compressed_bytes(10, 1)) + " bytes on cpu (10 values in 1 chunk), got " +
                          std::to_string(MinMaxUInt8::compressed_bytes(40, 1)) + " Byte on cpu"),
                std::string::npos)
          << text;
    }
  }
}

// GPU machines only (scripts/gpu-check.sh): the kernel gives the CPU's bytes.
TEST(MinMaxUInt8, CudaKernelMatchesTheCpuBitwise) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible (or a CPU build of LibTorch)";
  const at::Device gpu(at::kCUDA, 0);
  for (int64_t n : {0, 1, 33, 4096, 1000003, 25000000}) {
    for (int64_t chunks : {1, 2, 8}) {
      at::Tensor x = random_values(n, static_cast<uint64_t>(n + chunks));
      if (n > 10) x[n / 2] = NAN;  // chunk marking must agree too
      at::Tensor z_cpu = MinMaxUInt8::compress(x, chunks);
      at::Tensor z_gpu = MinMaxUInt8::compress(x.to(gpu), chunks);
      ASSERT_TRUE(z_gpu.is_cuda());
      ASSERT_TRUE(at::equal(z_gpu.cpu(), z_cpu)) << "n=" << n << " chunks=" << chunks;
      at::Tensor back_cpu = at::empty({n}), back_gpu = at::empty({n}, at::TensorOptions().device(gpu));
      MinMaxUInt8::decompress(z_cpu, back_cpu, chunks);
      MinMaxUInt8::decompress(z_gpu, back_gpu, chunks);
      // Exactly equal, NaN for NaN (the marked chunk decompresses to NaNs,
      // which at::equal never calls equal).
      ASSERT_TRUE(at::allclose(back_gpu.cpu(), back_cpu, /*rtol=*/0, /*atol=*/0, /*equal_nan=*/true))
          << "n=" << n << " chunks=" << chunks;
      if (n > 10) {
        EXPECT_TRUE(back_cpu[n / 2].isnan().item<bool>());
        EXPECT_EQ(MinMaxUInt8::first_non_finite_chunk(z_gpu, n, chunks),
                  MinMaxUInt8::first_non_finite_chunk(z_cpu, n, chunks));
      }
    }
  }
}

// GPU machines only: the fused sums (decompress_add, decompress_sum) give
// the CPU loop's bits too, for 1 to 9 sources (over the kernel's 8 per
// pass), with and without the average, aligned or not (a view one float in
// takes the kernel's scalar path).
TEST(MinMaxUInt8, CudaFusedSumsMatchTheCpuBitwise) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible (or a CPU build of LibTorch)";
  const at::Device gpu(at::kCUDA, 0);
  for (int64_t n : {1, 7, 4096, 1000003}) {
    for (int parts : {1, 2, 3, 9}) {
      std::vector<at::Tensor> cpu_parts, gpu_parts;
      for (int k = 0; k < parts; ++k) {
        at::Tensor x = random_values(n, static_cast<uint64_t>(17 * n + k));
        cpu_parts.push_back(MinMaxUInt8::compress(x, 1));
        gpu_parts.push_back(cpu_parts.back().to(gpu));
      }
      for (bool average : {false, true}) {
        for (bool aligned : {true, false}) {
          at::Tensor want = at::empty({n});
          MinMaxUInt8::decompress_sum(cpu_parts, want, average);
          at::Tensor storage = at::full({n + 1}, 7.0f, at::TensorOptions().device(gpu));
          at::Tensor got = aligned ? storage.narrow(0, 0, n) : storage.narrow(0, 1, n);
          MinMaxUInt8::decompress_sum(gpu_parts, got, average);
          ASSERT_TRUE(at::equal(got.cpu(), want))
              << "n=" << n << " parts=" << parts << " average=" << average << " aligned=" << aligned;
        }
      }
    }
    for (int64_t chunks : {1, 3, 8}) {
      at::Tensor x = random_values(n, static_cast<uint64_t>(n + 5 * chunks));
      at::Tensor z = MinMaxUInt8::compress(x, chunks);
      at::Tensor base = random_values(n, static_cast<uint64_t>(n + 11 * chunks));
      at::Tensor want = base.clone();
      MinMaxUInt8::decompress_add(z, want, chunks);
      at::Tensor got = base.to(gpu);
      MinMaxUInt8::decompress_add(z.to(gpu), got, chunks);
      ASSERT_TRUE(at::equal(got.cpu(), want)) << "n=" << n << " chunks=" << chunks;
    }
  }
}

}  // namespace
