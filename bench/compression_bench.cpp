// MinMaxUInt8 throughput against a plain copy of the same float32 tensor on
// the same device, in the same run (see docs/benchmarks.md).
//
//   build/bench/compression_bench [cpu|cuda] [chunks] [threads]
//
// Default device: cuda when a GPU is visible, else cpu; on the CPU one
// thread unless given (figures per core). For each size it prints the
// median over 5 rounds (the operations alternate within a round) of, in
// GB/s of float32 data:
//   compress     float32 bytes read per second (min/max, then quantise);
//   decompress   float32 bytes written per second;
//   dec+add      decompress_add (low_precision_decentralized's
//                `replica += decompressed difference`): float32 bytes of
//                the sum updated per second;
//   sum2 fused   decompress_sum of two compressed parts (ByteGrad's
//                scatter-reduce of two ranks): float32 bytes written per
//                second, one pass;
//   sum2 loop    the same result the unfused way (zero, then decompress
//                each part into a scratch tensor and add it);
//   copy         a plain copy (bytes copied per second, read + write
//                counted once, like the others);
// and the codec's ratios to the copy. A ratio near 1 is memory speed.
#include <bagua/compression.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

void sync(const at::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// Seconds per call over enough calls to last ~50 ms, after a warm-up.
double seconds_per_call(const at::Device& device, const std::function<void()>& op) {
  op();
  sync(device);
  int iters = 1;
  for (;;) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) op();
    sync(device);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0.05 || iters >= (1 << 14)) return s / iters;
    iters *= 4;
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string which = argc > 1 ? argv[1] : (torch::cuda::is_available() ? "cuda" : "cpu");
  const int64_t chunks = argc > 2 ? std::atoll(argv[2]) : 1;
  if (argc > 3) {
    at::set_num_threads(std::atoi(argv[3]));
  } else if (which == "cpu") {
    at::set_num_threads(1);
  }
  if (which != "cpu" && which != "cuda") {
    std::fprintf(stderr, "usage: compression_bench [cpu|cuda] [chunks] [threads]\n");
    return 2;
  }
  if (which == "cuda" && !torch::cuda::is_available()) {
    std::fprintf(stderr, "compression_bench: no GPU visible (or a CPU build of LibTorch)\n");
    return 2;
  }
  const at::Device device = which == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  std::printf("MinMaxUInt8 on %s, %lld chunk(s), %d threads; GB/s of float32 data, median of 5 rounds\n",
              device.str().c_str(), static_cast<long long>(chunks), at::get_num_threads());
  std::printf("%10s %9s %10s %8s %10s %9s %7s %9s %11s %9s\n", "floats", "compress", "decompress", "dec+add",
              "sum2 fused", "sum2 loop", "copy", "comp/copy", "decomp/copy", "sum2/copy");
  std::vector<int64_t> sizes = {1 << 16, 1 << 20, 1 << 22, 1 << 24};
  if (device.is_cuda()) sizes.push_back(1 << 26);
  for (int64_t n : sizes) {
    at::Tensor x = at::randn({n}, at::TensorOptions().device(device));
    at::Tensor y = at::empty_like(x);
    at::Tensor z = at::empty({bagua::MinMaxUInt8::compressed_bytes(n, chunks)},
                             at::TensorOptions().dtype(at::kByte).device(device));
    at::Tensor back = at::empty_like(x);
    std::vector<at::Tensor> parts{z, bagua::MinMaxUInt8::compress(at::randn({n}, x.options()), 1)};
    if (chunks != 1) parts = {bagua::MinMaxUInt8::compress(x, 1), parts[1]};
    at::Tensor one = at::empty_like(x);
    std::vector<double> comp, decomp, add, fused, loop, copy;
    for (int round = 0; round < 5; ++round) {
      comp.push_back(seconds_per_call(device, [&] { bagua::MinMaxUInt8::compress(x, z, chunks); }));
      decomp.push_back(seconds_per_call(device, [&] { bagua::MinMaxUInt8::decompress(z, back, chunks); }));
      add.push_back(seconds_per_call(device, [&] { bagua::MinMaxUInt8::decompress_add(z, back, chunks); }));
      fused.push_back(seconds_per_call(device, [&] { bagua::MinMaxUInt8::decompress_sum(parts, back, true); }));
      loop.push_back(seconds_per_call(device, [&] {
        back.zero_();
        for (const auto& p : parts) {
          bagua::MinMaxUInt8::decompress(p, one, 1);
          back.add_(one);
        }
        back.div_(2);
      }));
      copy.push_back(seconds_per_call(device, [&] { y.copy_(x); }));
    }
    const double gb = static_cast<double>(n) * 4 / 1e9;
    const double c = gb / median(comp), d = gb / median(decomp), f = gb / median(fused), l = gb / median(loop);
    const double k = gb / median(copy), a = gb / median(add);
    std::printf("%10lld %9.1f %10.1f %8.1f %10.1f %9.1f %7.1f %9.2f %11.2f %9.2f\n", static_cast<long long>(n), c, d,
                a, f, l, k, c / k, d / k, f / k);
    std::fflush(stdout);
  }
  return 0;
}
