// Step time and bytes of the low-precision algorithms against
// gradient_allreduce, on the same model in the same run.
//
//   build/cli/bagua launch --nproc-per-node 2 --no-prefix --echo-rank 0 -- build/bench/algorithms_bench [--decentralized] [MODEL...]
//   sudo bash bench/slow_link.sh 1gbit -- build/bench/algorithms_bench        (two "machines", 1 Gbit/s)
//   sudo bash bench/slow_link.sh 1gbit 4 -- build/bench/algorithms_bench --decentralized mlp1m   (four)
//
// --decentralized compares gradient_allreduce with decentralized (all and
// shift_one, hierarchical off) and low_precision_decentralized instead.
// --only NAME measures that algorithm alone against its baseline.
//
// MODEL: mlp1m (784-1024-1024-10, 1.9 M parameters) or mlp20m (784-4096-
// 4096-10, 20.0 M parameters); default both. Batch 64 of random data per
// worker. Algorithms: gradient_allreduce with SGD, bytegrad with SGD
// (hierarchical off: each worker is its own node here), qadam with its
// optimizer (hierarchical off, 8 warm-up steps, so the measured steps are
// all compressed) and, as qadam's full-precision counterpart,
// gradient_allreduce with Adam (learning rate 0 for both: random data with
// a short warm-up would make QAdam diverge, and the time of a step does not
// depend on the values). Each is wrapped once;
// they alternate in rounds of 5 steps after 10 unmeasured steps, 5 rounds. Rank 0 prints, per
// algorithm, the median seconds per step, its ratio to the full-precision
// counterpart, and the bytes this rank sent per step (the communication
// layer's counter).
#include <bagua/algorithms/bytegrad.h>
#include <bagua/algorithms/decentralized.h>
#include <bagua/algorithms/gradient_allreduce.h>
#include <bagua/algorithms/q_adam.h>
#include <bagua/communication.h>
#include <bagua/distributed.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

torch::nn::Sequential make_model(const std::string& name) {
  const int64_t hidden = name == "mlp20m" ? 4096 : 1024;
  torch::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Linear(784, hidden), torch::nn::ReLU(), torch::nn::Linear(hidden, hidden),
                               torch::nn::ReLU(), torch::nn::Linear(hidden, 10));
}

struct Contender {
  std::string name;
  std::string baseline;  // the full-precision counterpart it is compared with
  torch::nn::Sequential model{nullptr};
  std::shared_ptr<bagua::BaguaModule> ddp;
  std::vector<double> seconds;
  double bytes_per_step = 0;
};

}  // namespace

int main(int argc, char** argv) {
  bagua::init_process_group();
  const int rank = bagua::get_rank();
  std::vector<std::string> models;
  bool decentralized = false;
  std::string only;  // --only NAME: that contender (and its baseline) alone
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--decentralized") {
      decentralized = true;
    } else if (std::string(argv[i]) == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else {
      models.push_back(argv[i]);
    }
  }
  if (models.empty()) models = {"mlp1m", "mlp20m"};
  at::Tensor x = torch::randn({64, 784});
  at::Tensor y = torch::randint(0, 10, {64}, torch::kLong);
  if (rank == 0) {
    std::printf("world size %d, batch 64/worker, median of 5 rounds of 5 steps\n", bagua::get_world_size());
    std::printf("%8s %20s %10s %10s %14s\n", "model", "algorithm", "s/step", "ratio", "bytes/step");
  }
  for (const auto& model_name : models) {
    std::vector<Contender> all;
    auto add = [&](const std::string& name, const std::string& baseline,
                   const std::function<std::pair<std::shared_ptr<torch::optim::Optimizer>, bagua::AlgorithmPtr>(
                       torch::nn::Sequential&)>& make) {
      if (!only.empty() && name != only && name != "gradient_allreduce" && name != "adam+allreduce") return;
      Contender c{name, baseline, make_model(model_name), nullptr, {}, 0};
      auto [opt, algorithm] = make(c.model);
      c.ddp = bagua::with_bagua(*c.model, {opt}, algorithm);
      all.push_back(std::move(c));
    };
    add("gradient_allreduce", "", [](torch::nn::Sequential& m) {
      auto opt = std::make_shared<torch::optim::SGD>(m->parameters(), torch::optim::SGDOptions(0.01));
      return std::make_pair(std::shared_ptr<torch::optim::Optimizer>(opt),
                            bagua::AlgorithmPtr(std::make_shared<bagua::GradientAllReduce>(false, true)));
    });
    auto sgd_with = [&](const std::string& name, bagua::AlgorithmPtr algorithm) {
      add(name, "gradient_allreduce", [algorithm](torch::nn::Sequential& m) {
        auto opt = std::make_shared<torch::optim::SGD>(m->parameters(), torch::optim::SGDOptions(0.01));
        return std::make_pair(std::shared_ptr<torch::optim::Optimizer>(opt), algorithm);
      });
    };
    if (decentralized) {
      sgd_with("decentralized/all", std::make_shared<bagua::Decentralized>(false, "all"));
      if (bagua::get_world_size() % 2 == 0) {
        sgd_with("decentralized/shift1", std::make_shared<bagua::Decentralized>(false, "shift_one"));
      }
      sgd_with("low_precision_dec", std::make_shared<bagua::LowPrecisionDecentralized>(false));
    }
    if (!decentralized) add("bytegrad", "gradient_allreduce", [](torch::nn::Sequential& m) {
      auto opt = std::make_shared<torch::optim::SGD>(m->parameters(), torch::optim::SGDOptions(0.01));
      return std::make_pair(std::shared_ptr<torch::optim::Optimizer>(opt),
                            bagua::AlgorithmPtr(std::make_shared<bagua::ByteGrad>(false, true)));
    });
    if (!decentralized) add("adam+allreduce", "", [](torch::nn::Sequential& m) {
      auto opt = std::make_shared<torch::optim::Adam>(m->parameters(), torch::optim::AdamOptions(0.0));
      return std::make_pair(std::shared_ptr<torch::optim::Optimizer>(opt),
                            bagua::AlgorithmPtr(std::make_shared<bagua::GradientAllReduce>(false, true)));
    });
    if (!decentralized) add("qadam", "adam+allreduce", [](torch::nn::Sequential& m) {
      auto opt = std::make_shared<bagua::QAdamOptimizer>(m->parameters(), bagua::QAdamOptions(0.0).warmup_steps(8));
      return std::make_pair(std::shared_ptr<torch::optim::Optimizer>(opt),
                            bagua::AlgorithmPtr(std::make_shared<bagua::QAdamAlgorithm>(opt, false)));
    });
    auto step = [&](Contender& c) {
      c.ddp->zero_grad();
      torch::cross_entropy_loss(c.ddp->forward(c.model, x), y).backward();
      c.ddp->step();
    };
    for (auto& c : all) {
      for (int i = 0; i < 10; ++i) step(c);  // qadam: past its 8 warm-up steps
    }
    for (int round = 0; round < 5; ++round) {
      for (auto& c : all) {
        bagua::barrier();
        const int64_t bytes0 = c.ddp->bytes_sent();
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 5; ++i) step(c);
        c.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 5);
        c.bytes_per_step = static_cast<double>(c.ddp->bytes_sent() - bytes0) / 5;
      }
    }
    if (rank != 0) continue;
    for (const auto& c : all) {
      double s = median(c.seconds);
      std::string ratio = "";
      for (const auto& b : all) {
        if (b.name == c.baseline) ratio = std::to_string(s / median(b.seconds)).substr(0, 5) + "x";
      }
      std::printf("%8s %20s %10.4f %10s %14.0f\n", model_name.c_str(), c.name.c_str(), s, ratio.c_str(),
                  c.bytes_per_step);
    }
    std::fflush(stdout);
  }
  return 0;
}
