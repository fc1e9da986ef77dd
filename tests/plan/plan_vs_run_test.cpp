// The key test of `bagua plan`: its bytes per step held against the bytes
// measured in real runs of `bagua run` (comm_bytes of each metrics.jsonl
// window, rank 0's), for every algorithm of the registry on 2 workers and on
// 4 (one node of 4, or two simulated nodes of 2 for the hierarchical
// variants). The counter is deterministic for every synchronous algorithm,
// so each window must match exactly, well inside the 5% asked of it; async's
// rounds are timed by a clock, so its measured bytes must decompose into
// whole rounds of the predicted size.
#include <bagua/algorithms/registry.h>
#include <bagua/launch.h>
#include <bagua/plan.h>

#include "plan/plan_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <thread>

namespace {

using namespace bagua::testing;
using nlohmann::json;

const char* kSgd = "{type: sgd, lr: 0.05, momentum: 0.9}";

// One measured run: the algorithm's settings (the body of the recipe's
// algorithm mapping) and the world. Small buckets (4 KiB) give the MLP two
// of them, one padded by bytegrad and qadam on 4 workers.
struct Case {
  std::string algorithm;
  int nproc_per_node = 2, nnodes = 1;
  std::string settings;
  std::string optimizer = kSgd;
  int max_steps = 12, log_every = 4;
  int epochs = 1;
  bool via_launcher = false;  // one node only
};

// Every algorithm at both world sizes. A new registry algorithm fails the
// test until it has its cases here.
std::vector<Case> cases_for(const std::string& algorithm, int world) {
  const std::string qadam = "{type: qadam, lr: 0.001, warmup_steps: 4}";
  std::vector<Case> all = {
      // 2 workers, one node, every algorithm flat.
      // The launcher's path, as users run it, once.
      {"gradient_allreduce", 2, 1, "bucket_size: 4KiB", kSgd, 12, 4, 1, true},
      {"bytegrad", 2, 1, "bucket_size: 4KiB, hierarchical: false"},
      // Every 2nd step: windows of 3 steps hold 2 or 1 communication steps.
      {"decentralized", 2, 1, "bucket_size: 4KiB, hierarchical: false, peer_selection_mode: shift_one, "
                              "communication_interval: 2", kSgd, 12, 3},
      {"low_precision_decentralized", 2, 1, "bucket_size: 4KiB, hierarchical: false"},
      // Warm-up in the first window, compressed in the others.
      {"qadam", 2, 1, "bucket_size: 4KiB, hierarchical: false", qadam},
      // One bucket (the default size), averaged every millisecond after 4
      // warm-up steps; enough steps after them (across epochs: without
      // evaluation or checkpoints nothing pauses the averaging there) for
      // several rounds.
      {"async", 2, 1, "warmup_steps: 4, sync_interval_ms: 1", kSgd, 200, 4, 5},
      // 4 workers: flat on one node, or hierarchical over two simulated nodes.
      {"gradient_allreduce", 2, 2, "bucket_size: 4KiB, hierarchical: true"},
      {"bytegrad", 4, 1, "bucket_size: 4KiB, hierarchical: false"},
      {"decentralized", 2, 2, "bucket_size: 4KiB, hierarchical: true, peer_selection_mode: all, "
                              "communication_interval: 3"},
      {"low_precision_decentralized", 2, 2, "bucket_size: 4KiB, hierarchical: true"},
      {"qadam", 2, 2, "bucket_size: 4KiB, hierarchical: true", qadam},
      {"async", 4, 1, "warmup_steps: 4, sync_interval_ms: 1", kSgd, 200, 4, 5},
  };
  std::vector<Case> out;
  for (const auto& c : all) {
    if (c.algorithm == algorithm && c.nproc_per_node * c.nnodes == world) out.push_back(c);
  }
  return out;
}

struct Window {
  int64_t first, last, bytes;
};

class PlanVsRun : public PlanTest, public ::testing::WithParamInterface<std::tuple<std::string, int>> {
 protected:
  // Runs the case with the real `bagua run` and returns rank 0's windows
  // and output. Through the launcher for `via_launcher` (one node);
  // otherwise each worker is `bagua run` started as torchrun would start it
  // (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK set), which
  // simulates several nodes on this machine and spares each run the
  // launcher's own LibTorch start and data check (the bytes are the
  // workers' either way).
  std::vector<Window> run(const Case& c, const std::string& recipe, std::string* output) {
    const int world = c.nproc_per_node * c.nnodes;
    if (c.via_launcher) {
      CliResult r = run_bagua(dir_, "run " + recipe + " --nproc-per-node " + std::to_string(c.nproc_per_node));
      EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
      *output = r.out + r.err;
    } else {
      const int port = bagua::find_free_port();
      std::vector<CliResult> results(world);
      std::vector<std::thread> ranks;
      for (int rank = 0; rank < world; ++rank) {
        ranks.emplace_back([&, rank] {
          const std::string stem = (dir_ / ("rank" + std::to_string(rank))).string();
          const std::string env =
              "RANK=" + std::to_string(rank) + " WORLD_SIZE=" + std::to_string(world) +
              " LOCAL_RANK=" + std::to_string(rank % c.nproc_per_node) +
              " LOCAL_WORLD_SIZE=" + std::to_string(c.nproc_per_node) +
              " GROUP_RANK=" + std::to_string(rank / c.nproc_per_node) +
              " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " OMP_NUM_THREADS=1 BAGUA_TIMEOUT_S=60";
          const int status = std::system((env + " " + BAGUA_CLI + " run " + recipe + " > " + stem + ".out 2>&1").c_str());
          results[rank].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
          results[rank].out = slurp(stem + ".out");
        });
      }
      for (auto& t : ranks) t.join();
      for (int rank = 0; rank < world; ++rank) {
        EXPECT_EQ(results[rank].exit_code, 0) << "rank " << rank << ":\n" << results[rank].out;
      }
      *output = results[0].out;
    }
    std::vector<Window> windows;
    int64_t previous = 0;
    std::ifstream in(dir_ / "run" / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line);
      if (!j.contains("comm_bytes") || !j.contains("step")) continue;
      const int64_t step = j["step"];
      windows.push_back({previous + 1, step, j["comm_bytes"].get<int64_t>()});
      previous = step;
    }
    return windows;
  }
};

std::string describe(const Case& c) {
  return c.algorithm + " on " + std::to_string(c.nnodes) + "x" + std::to_string(c.nproc_per_node) + " {" +
         c.settings + "}";
}

TEST_P(PlanVsRun, PredictedBytesPerStepMatchTheRun) {
  const auto& [algorithm, world] = GetParam();
  const auto cases = cases_for(algorithm, world);
  ASSERT_FALSE(cases.empty()) << "no measured case for " << algorithm << " on " << world
                              << " workers: add one to cases_for()";
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    const std::string recipe = write_recipe("run", "name: " + c.algorithm + ", " + c.settings, c.optimizer);
    const std::vector<std::string> overrides = {
        "distributed.nproc_per_node=" + std::to_string(c.nproc_per_node),
        "distributed.nnodes=" + std::to_string(c.nnodes), "train.max_steps=" + std::to_string(c.max_steps),
        "train.log_every_steps=" + std::to_string(c.log_every), "train.epochs=" + std::to_string(c.epochs)};
    std::string recipe_args = recipe;
    for (const auto& o : overrides) recipe_args += " --set " + o;

    bagua::Plan plan = bagua::make_plan(bagua::load_recipe(recipe, overrides));
    const bagua::PlanAlgorithm& a = plan.algorithm;
    ASSERT_TRUE(a.runnable) << a.note;

    std::string output;
    std::vector<Window> windows = run(c, recipe_args, &output);
    ASSERT_EQ(static_cast<int64_t>(windows.size()), (c.max_steps + c.log_every - 1) / c.log_every) << output;

    // The steps, as the run announced them.
    const std::string announced = std::to_string(plan.steps.per_epoch) + " steps per epoch of batch 16 per worker, " +
                                  std::to_string(plan.steps.total) + " steps in all";
    EXPECT_NE(output.find(announced), std::string::npos) << announced << "\n" << output;

    // Async: only its warm-up is per step; the rounds come after.
    int64_t per_step_until = c.max_steps;
    const bagua::PlanPhase* round = nullptr;
    for (const auto& p : a.phases) {
      if (p.per_round) round = &p;
    }
    if (round) per_step_until = round->first_step - 1;

    int64_t async_bytes = 0;
    for (const Window& w : windows) {
      if (w.last <= per_step_until) {
        const int64_t predicted = a.bytes_sent(w.first, w.last);
        std::printf("[plan vs run] %-28s %dx%d steps %2lld-%-2lld predicted %9lld measured %9lld\n",
                    c.algorithm.c_str(), c.nnodes, c.nproc_per_node, static_cast<long long>(w.first),
                    static_cast<long long>(w.last), static_cast<long long>(predicted),
                    static_cast<long long>(w.bytes));
        EXPECT_LE(std::abs(static_cast<double>(w.bytes - predicted)), 0.05 * static_cast<double>(predicted))
            << "steps " << w.first << "-" << w.last;
        EXPECT_EQ(w.bytes, predicted) << "steps " << w.first << "-" << w.last << ": the counter is deterministic";
      } else {
        ASSERT_GT(w.first, per_step_until) << "a window mixes warm-up and averaging: align log_every_steps";
        async_bytes += w.bytes;
      }
    }

    if (round) {
      // Rounds of one weight bucket: a vote, then the bucket. The last round
      // counted may have voted and not yet sent its bucket.
      ASSERT_EQ(a.buckets.buckets.size(), 1u);
      const int n = plan.world.world_size;
      const int64_t vote = static_cast<int64_t>(8.0 * 2 * (n - 1) / n + 0.5);  // an allreduce of one float64
      const int64_t weights = round->leader.total() - vote;
      int64_t rounds = -1;
      for (int64_t b = 1; b * weights <= async_bytes; ++b) {
        const int64_t rest = async_bytes - b * weights;
        if (rest == b * vote || rest == (b + 1) * vote) rounds = b;
      }
      std::printf("[plan vs run] %-28s %dx%d steps %2lld-%-2lld predicted %9lld per round, measured %lld = %lld "
                  "rounds\n",
                  c.algorithm.c_str(), c.nnodes, c.nproc_per_node, static_cast<long long>(per_step_until + 1),
                  static_cast<long long>(c.max_steps), static_cast<long long>(round->leader.total()),
                  static_cast<long long>(async_bytes), static_cast<long long>(rounds));
      EXPECT_GE(rounds, 1) << async_bytes << " B after the warm-up are not whole rounds of " << weights
                           << " B of weights and a " << vote << " B vote";
      EXPECT_GT(round->leader.total(), 0);
    }

    // Padding matters: qadam's warm-up allreduces padded buckets, and an
    // unpadded prediction (gradient_allreduce's buckets) must not match.
    if (c.algorithm == "qadam" && a.buckets.padding_bytes > 0) {
      int64_t unpadded = 0;
      for (const auto& alt : plan.alternatives) {
        if (alt.name == "gradient_allreduce" && !alt.kwargs.at("hierarchical").get<bool>()) {
          unpadded = alt.bytes_sent(windows.at(0).first, windows.at(0).last);
        }
      }
      EXPECT_NE(windows.at(0).bytes, unpadded) << "padding is invisible to this test";
    }
  }
}

std::vector<std::tuple<std::string, int>> every_algorithm_and_world() {
  std::vector<std::tuple<std::string, int>> out;
  for (const auto& d : bagua::algorithm_catalog()) {
    if (!bagua::algorithm_implemented(d.name)) continue;
    for (int world : {2, 4}) out.emplace_back(d.name, world);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(EveryAlgorithm, PlanVsRun, ::testing::ValuesIn(every_algorithm_and_world()),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) +
                                  "_workers";
                         });

}  // namespace
