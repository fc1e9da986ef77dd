// What a straggler costs the other workers under each algorithm.
//
//   build/cli/bagua launch --nproc-per-node 2 --no-prefix --echo-rank 0 -- build/bench/straggler_bench [FACTOR]
//
// Two workers (or more) train an MLP 784-1024-1024-10 on random data, batch
// 64, SGD; the last rank is made FACTOR times slower (default 2) by sleeping
// after each step for (FACTOR - 1) times the time its step took. Rank 0
// prints its own samples/s under gradient_allreduce, decentralized (all,
// hierarchical off) and async (sync_interval_ms 50, no warm-up), and the
// ratio of each to gradient_allreduce. The synchronous algorithms run a
// fixed number of steps on every rank; async runs for a fixed time on
// every rank (its ranks take different numbers of steps), then aborts.
#include <bagua/algorithms/async_model_average.h>
#include <bagua/algorithms/decentralized.h>
#include <bagua/algorithms/gradient_allreduce.h>
#include <bagua/communication.h>
#include <bagua/distributed.h>

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

int main(int argc, char** argv) {
  const double factor = argc > 1 ? std::atof(argv[1]) : 2.0;
  bagua::init_process_group();
  const int rank = bagua::get_rank(), world = bagua::get_world_size();
  const bool straggler = rank == world - 1;
  at::Tensor x = torch::randn({64, 784});
  at::Tensor y = torch::randint(0, 10, {64}, torch::kLong);
  if (rank == 0) {
    std::printf("%d workers, rank %d %.1fx slower per step; samples/s of rank 0\n", world, world - 1, factor);
    std::printf("%20s %12s %10s\n", "algorithm", "samples/s", "ratio");
  }
  double baseline = 0;
  for (const std::string name : {"gradient_allreduce", "decentralized", "async"}) {
    torch::manual_seed(0);
    auto model = torch::nn::Sequential(torch::nn::Linear(784, 1024), torch::nn::ReLU(), torch::nn::Linear(1024, 1024),
                                       torch::nn::ReLU(), torch::nn::Linear(1024, 10));
    auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.01));
    std::shared_ptr<const bagua::AsyncModelAverage> async;
    bagua::AlgorithmPtr algorithm;
    if (name == "gradient_allreduce") algorithm = std::make_shared<bagua::GradientAllReduce>();
    if (name == "decentralized") algorithm = std::make_shared<bagua::Decentralized>(false, "all");
    if (name == "async") algorithm = async = std::make_shared<bagua::AsyncModelAverage>("all", 50, 0);
    auto ddp = bagua::with_bagua(*model, {sgd}, algorithm);
    auto step = [&] {
      auto t0 = Clock::now();
      ddp->zero_grad();
      torch::cross_entropy_loss(ddp->forward(model, x), y).backward();
      ddp->step();
      if (straggler) std::this_thread::sleep_for(std::chrono::duration<double>((factor - 1) * seconds_since(t0)));
    };
    for (int i = 0; i < 5; ++i) step();
    bagua::barrier();
    auto t0 = Clock::now();
    int64_t steps = 0;
    if (async) {
      while (seconds_since(t0) < 6.0) {
        step();
        ++steps;
      }
    } else {
      for (; steps < 150; ++steps) step();
    }
    const double rate = static_cast<double>(steps * 64) / seconds_since(t0);
    if (async) async->abort(*ddp);
    if (name == "gradient_allreduce") baseline = rate;
    if (rank == 0) {
      std::printf("%20s %12.0f %9.2fx\n", name.c_str(), rate, rate / baseline);
      std::fflush(stdout);
    }
    bagua::barrier();
  }
  return 0;
}
