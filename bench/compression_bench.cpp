// MinMaxUInt8 throughput against a plain copy of the same float32 tensor on
// the same device, in the same run (see docs/benchmarks.md).
//
//   build/bench/compression_bench [cpu|cuda] [chunks]
//
// Default device: cuda when a GPU is visible, else cpu. For each size it
// prints the median over 5 rounds (the three operations alternate within a
// round) of: input GB/s of compress (float32 bytes read per second) and of
// decompress (float32 bytes written per second), the copy's GB/s (bytes
// copied per second, read + write counted once, like the others), and the
// ratios to the copy. A ratio near 1 means the codec runs at memory speed.
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
  if (which != "cpu" && which != "cuda") {
    std::fprintf(stderr, "usage: compression_bench [cpu|cuda] [chunks]\n");
    return 2;
  }
  if (which == "cuda" && !torch::cuda::is_available()) {
    std::fprintf(stderr, "compression_bench: no GPU visible (or a CPU build of LibTorch)\n");
    return 2;
  }
  const at::Device device = which == "cuda" ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  std::printf("MinMaxUInt8 on %s, %lld chunk(s), %d threads; GB/s of float32 data, median of 5 rounds\n",
              device.str().c_str(), static_cast<long long>(chunks), at::get_num_threads());
  std::printf("%12s %12s %12s %12s %10s %10s\n", "floats", "compress", "decompress", "copy", "comp/copy",
              "decomp/copy");
  std::vector<int64_t> sizes = {1 << 16, 1 << 20, 1 << 22, 1 << 24};
  if (device.is_cuda()) sizes.push_back(1 << 26);
  for (int64_t n : sizes) {
    at::Tensor x = at::randn({n}, at::TensorOptions().device(device));
    at::Tensor y = at::empty_like(x);
    at::Tensor z = at::empty({bagua::MinMaxUInt8::compressed_bytes(n, chunks)},
                             at::TensorOptions().dtype(at::kByte).device(device));
    at::Tensor back = at::empty_like(x);
    std::vector<double> comp, decomp, copy;
    for (int round = 0; round < 5; ++round) {
      comp.push_back(seconds_per_call(device, [&] { bagua::MinMaxUInt8::compress(x, z, chunks); }));
      decomp.push_back(seconds_per_call(device, [&] { bagua::MinMaxUInt8::decompress(z, back, chunks); }));
      copy.push_back(seconds_per_call(device, [&] { y.copy_(x); }));
    }
    const double gb = static_cast<double>(n) * 4 / 1e9;
    const double c = gb / median(comp), d = gb / median(decomp), k = gb / median(copy);
    std::printf("%12lld %12.1f %12.1f %12.1f %10.2f %10.2f\n", static_cast<long long>(n), c, d, k, c / k, d / k);
    std::fflush(stdout);
  }
  return 0;
}
