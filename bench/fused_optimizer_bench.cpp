// The optimizer step, fused (bagua::fuse_optimizer) against unfused, on a
// model of many small layers, in the same run (see docs/benchmarks.md).
//
//   build/bench/fused_optimizer_bench [layers] [width] [threads] [cpu|cuda]
//
// Defaults: 300 layers of width 32 (a width x width weight and a bias each,
// 600 parameters, 0.3 M floats), the threads LibTorch picks, cpu. For each
// optimizer it times step() alone (the gradients are set once and stay),
// fused and unfused alternating within each of 7 rounds of 50 steps, and
// prints the median time per step and the ratio unfused / fused.
#include <bagua/fused_optimizer.h>

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

using Factory = std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)>;

std::vector<at::Tensor> make_params(int64_t layers, int64_t width, const at::Device& device) {
  torch::manual_seed(0);
  std::vector<at::Tensor> params;
  for (int64_t l = 0; l < layers; ++l) {
    params.push_back(torch::randn({width, width}, torch::device(device)).requires_grad_());
    params.push_back(torch::randn({width}, torch::device(device)).requires_grad_());
  }
  for (auto& p : params) p.mutable_grad() = torch::randn_like(p) * 1e-3;
  return params;
}

void sync(const at::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

double seconds_per_step(torch::optim::Optimizer& optimizer, int steps, const at::Device& device) {
  sync(device);
  auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) optimizer.step();
  sync(device);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t layers = argc > 1 ? std::atoll(argv[1]) : 300;
  const int64_t width = argc > 2 ? std::atoll(argv[2]) : 32;
  if (argc > 3 && std::atoi(argv[3]) > 0) at::set_num_threads(std::atoi(argv[3]));
  const at::Device device(argc > 4 ? argv[4] : "cpu");
  const int rounds = 7, steps = 50;
  using namespace torch::optim;
  const std::vector<std::pair<std::string, Factory>> optimizers{
      {"sgd (momentum 0.9)", [](auto p) { return std::make_shared<SGD>(p, SGDOptions(0.01).momentum(0.9)); }},
      {"adam", [](auto p) { return std::make_shared<Adam>(p, AdamOptions(1e-3)); }},
      {"adamw", [](auto p) { return std::make_shared<AdamW>(p, AdamWOptions(1e-3)); }},
      {"rmsprop", [](auto p) { return std::make_shared<RMSprop>(p, RMSpropOptions(1e-3)); }},
      {"adagrad", [](auto p) { return std::make_shared<Adagrad>(p, AdagradOptions(1e-3)); }},
  };
  std::printf("optimizer step, %lld layers of %lldx%lld + %lld (%lld parameters, %lld values), %d threads, %s; "
              "median of %d rounds of %d steps\n\n",
              static_cast<long long>(layers), static_cast<long long>(width), static_cast<long long>(width),
              static_cast<long long>(width), static_cast<long long>(2 * layers),
              static_cast<long long>(layers * (width * width + width)), at::get_num_threads(),
              device.str().c_str(), rounds, steps);
  std::printf("%-20s %14s %14s %8s\n", "optimizer", "unfused ms", "fused ms", "ratio");
  for (const auto& [name, make] : optimizers) {
    auto plain_params = make_params(layers, width, device);
    auto fused_params = make_params(layers, width, device);
    auto plain = make(plain_params);
    auto fused = bagua::fuse_optimizer(make(fused_params));
    std::vector<double> t_plain, t_fused;
    for (int r = 0; r < rounds; ++r) {
      t_plain.push_back(seconds_per_step(*plain, steps, device));
      t_fused.push_back(seconds_per_step(*fused, steps, device));
    }
    const double a = median(t_plain), b = median(t_fused);
    std::printf("%-20s %14.3f %14.3f %7.1fx\n", name.c_str(), a * 1e3, b * 1e3, a / b);
  }
  return 0;
}
