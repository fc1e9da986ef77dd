// Step time of GradientAllReduce with communication overlapped with backward
// versus the same buckets communicated only after backward, in one run.
//
//   build/cli/bagua launch --nproc-per-node 2 --no-prefix --echo-rank 0 -- build/bench/overlap_bench [MiB...]
//   sudo bash bench/slow_link.sh 2gbit          (the same over an emulated slow link)
//
// Arguments: bucket sizes in MiB to measure (default: 10 2).
// Model: MLP 784-1024-1024-1024-10 (2.9 M parameters, 11.6 MB of float32
// gradients), batch 64 per worker, SGD. For each bucket size, the two modes
// alternate in rounds of 10 steps after 3 warm-up steps; rank 0 prints the
// median seconds per step of each and the ratio.
#include <bagua/algorithms/gradient_allreduce.h>
#include <bagua/communication.h>
#include <bagua/distributed.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  bagua::init_process_group();
  const int rank = bagua::get_rank();
  torch::manual_seed(0);
  auto model = torch::nn::Sequential(torch::nn::Linear(784, 1024), torch::nn::ReLU(), torch::nn::Linear(1024, 1024),
                                     torch::nn::ReLU(), torch::nn::Linear(1024, 1024), torch::nn::ReLU(),
                                     torch::nn::Linear(1024, 10));
  auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.01));
  at::Tensor x = torch::randn({64, 784});
  at::Tensor y = torch::randint(0, 10, {64}, torch::kLong);
  if (rank == 0) {
    std::printf("GradientAllReduce step time, world size %d, MLP 784-1024x3-10, batch 64/worker\n",
                bagua::get_world_size());
    std::printf("%12s %14s %14s %10s\n", "bucket", "overlap s/step", "after s/step", "speedup");
  }
  std::vector<int64_t> bucket_sizes;
  for (int i = 1; i < argc; ++i) bucket_sizes.push_back(std::atoll(argv[i]));
  if (bucket_sizes.empty()) bucket_sizes = {10, 2};
  for (int64_t bucket_mib : bucket_sizes) {
    std::vector<double> times[2];
    for (int round = 0; round < 7; ++round) {
      for (int mode = 0; mode < 2; ++mode) {
        bagua::WithBaguaOptions options;
        options.bucket_bytes = bucket_mib << 20;
        options.overlap = mode == 0;
        auto module = bagua::with_bagua(*model, {sgd}, std::make_shared<bagua::GradientAllReduce>(), options);
        auto step = [&] {
          module->zero_grad();
          torch::cross_entropy_loss(module->forward(model, x), y).backward();
          module->step();
        };
        for (int i = 0; i < 3; ++i) step();
        bagua::barrier();
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 10; ++i) step();
        times[mode].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 10);
      }
    }
    if (rank == 0) {
      double on = median(times[0]), off = median(times[1]);
      std::printf("%9ld MiB %14.4f %14.4f %9.2fx\n", static_cast<long>(bucket_mib), on, off, off / on);
      std::fflush(stdout);
    }
  }
  return 0;
}
