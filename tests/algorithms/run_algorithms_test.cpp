// The algorithms through `bagua run`: accuracy against their
// full-precision counterparts in the same test, bytes on the wire, and a
// crash-and-resume that ends bit for bit where an uninterrupted run does.
#include "support/algorithm_cells.h"
#include "support/bagua_run.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/serialize.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace bagua::testing;

// Runs the quickstart recipe for one epoch on 2 workers with `sets`.
struct Quick {
  double accuracy = -1;
  double bytes_per_step = 0;       // over the whole run
  double late_bytes_per_step = 0;  // after the first record (step 100): past qadam's warm-up
};

class AlgorithmRun : public RunTest {
 protected:
  Quick quickstart(const std::string& name, const std::string& sets) {
    fs::path out = dir_ / name;
    RunOutcome r = bagua_run(kSource + "/recipes/fashion-mnist-mlp.yaml --set train.epochs=1 --set output.dir=" +
                             out.string() + " " + sets);
    EXPECT_EQ(r.exit_code, 0) << name << ":\n" << r.output;
    Quick q;
    q.accuracy = final_accuracy(out / "metrics.jsonl");
    int64_t bytes = 0, steps = 0, first_bytes = -1, first_step = 0;
    for (const auto& j : metrics(out / "metrics.jsonl")) {
      if (!j.contains("comm_bytes")) continue;
      bytes += j["comm_bytes"].get<int64_t>();
      steps = j["step"].get<int64_t>();
      if (first_bytes < 0) {
        first_bytes = j["comm_bytes"].get<int64_t>();
        first_step = steps;
      }
    }
    q.bytes_per_step = steps > 0 ? static_cast<double>(bytes) / steps : 0;
    if (steps > first_step) q.late_bytes_per_step = static_cast<double>(bytes - first_bytes) / (steps - first_step);
    return q;
  }
};

// At their defaults (hierarchical: auto, flat on this one node): with
// Bagua's hierarchical default they would send as many bytes as
// gradient_allreduce, compressing nothing.
TEST_F(AlgorithmRun, ByteGradAndQAdamTrainAsWellWithAQuarterOfTheBytes) {
  Quick sgd = quickstart("gradient_allreduce", "");
  Quick bytegrad = quickstart("bytegrad", "--set algorithm.name=bytegrad");
  Quick adam = quickstart("adam", "--set 'optimizers=[{type: adam, lr: 0.001}]'");
  Quick qadam = quickstart("qadam", "--set 'optimizers=[{type: qadam, lr: 0.001, warmup_steps: 100}]' "
                                    "--set algorithm.name=qadam");
  EXPECT_GT(sgd.accuracy, 0.75);
  EXPECT_GT(adam.accuracy, 0.75);
  EXPECT_GE(bytegrad.accuracy, sgd.accuracy - 0.015) << "bytegrad " << bytegrad.accuracy << " vs " << sgd.accuracy;
  EXPECT_GE(qadam.accuracy, adam.accuracy - 0.015) << "qadam " << qadam.accuracy << " vs adam " << adam.accuracy;
  ASSERT_GT(sgd.bytes_per_step, 0);
  EXPECT_LE(bytegrad.bytes_per_step, 0.3 * sgd.bytes_per_step)
      << "bytegrad " << bytegrad.bytes_per_step << " B/step vs " << sgd.bytes_per_step;
  // QAdam: full precision during its 100 warm-up steps (the first record),
  // 8 bits after.
  EXPECT_EQ(qadam.bytes_per_step > 0.3 * adam.bytes_per_step, true) << "the warm-up is in full precision";
  EXPECT_LE(qadam.late_bytes_per_step, 0.3 * adam.late_bytes_per_step)
      << "qadam " << qadam.late_bytes_per_step << " B/step vs " << adam.late_bytes_per_step;
}

// ReLU models whose units and inputs get exactly zero gradients through the
// warm-up (784-256-256-10 MLP, the BatchNorm CNN): QAdam's frozen second
// moment is 0 there, and before the max(v, m^2) protection its steps were
// m / eps: 10% accuracy and exit 0. One epoch each, against Adam and SGD
// under gradient_allreduce on the same model and data.
TEST_F(AlgorithmRun, QAdamAndByteGradKeepTheirAccuracyOnReLUModelsWithSilentUnits) {
  for (const char* model : {"mlp_deep.pt", "bn_cnn.pt"}) {
    const std::string m = std::string(model).substr(0, std::string(model).size() - 3);
    const std::string use = "--set model.torchscript=" + kSource + "/tests/fixtures/models/" + model + " ";
    Quick sgd = quickstart(m + "_sgd", use);
    Quick adam = quickstart(m + "_adam", use + "--set 'optimizers=[{type: adam, lr: 0.002}]'");
    Quick qadam = quickstart(m + "_qadam", use + "--set 'optimizers=[{type: qadam, lr: 0.002, warmup_steps: 100}]' "
                                                "--set 'algorithm={name: qadam, hierarchical: false}'");
    Quick bytegrad = quickstart(m + "_bytegrad", use + "--set 'algorithm={name: bytegrad, hierarchical: false}'");
    EXPECT_GT(sgd.accuracy, 0.75) << model;
    EXPECT_GT(adam.accuracy, 0.75) << model;
    EXPECT_GE(qadam.accuracy, adam.accuracy - 0.015) << model << ": qadam " << qadam.accuracy << " vs adam " << adam.accuracy;
    if (m == "mlp_deep") {  // (the CNN's SGD, cosine-scheduled, ends 1.4 points above its Adam)
      EXPECT_GE(qadam.accuracy, sgd.accuracy - 0.015) << model << ": qadam " << qadam.accuracy << " vs sgd " << sgd.accuracy;
    }
    EXPECT_GE(bytegrad.accuracy, sgd.accuracy - 0.015) << model << ": bytegrad " << bytegrad.accuracy << " vs " << sgd.accuracy;
  }
}

// The per-rank algorithms against gradient_allreduce on the quickstart
// model, one epoch each, 2 workers (hierarchical off: one machine).
TEST_F(AlgorithmRun, PerRankAlgorithmsTrainWithinTwoPointsOfGradientAllReduce) {
  Quick sgd = quickstart("gradient_allreduce", "");
  Quick dec = quickstart("decentralized", "--set 'algorithm={name: decentralized, hierarchical: false}'");
  Quick shift = quickstart("shift_one", "--set 'algorithm={name: decentralized, hierarchical: false, "
                                        "peer_selection_mode: shift_one}'");
  Quick lpd = quickstart("low_precision_decentralized",
                         "--set 'algorithm={name: low_precision_decentralized, hierarchical: false}'");
  Quick async = quickstart("async", "--set 'algorithm={name: async, sync_interval_ms: 50}'");
  EXPECT_GT(sgd.accuracy, 0.75);
  for (const auto& [name, q] : {std::pair<std::string, Quick>{"decentralized", dec}, {"shift_one", shift},
                                {"low_precision_decentralized", lpd}, {"async", async}}) {
    EXPECT_GE(q.accuracy, sgd.accuracy - 0.02) << name << " " << q.accuracy << " vs " << sgd.accuracy;
  }
  // low_precision_decentralized sends its compressed weights (a quarter of
  // their bytes) to each of its 2 neighbours, which in a ring of two are
  // one peer, sent them once: P/4 a step, against gradient_allreduce's
  // 2(n-1)/n P = P for n = 2.
  EXPECT_LE(lpd.late_bytes_per_step, 0.3 * sgd.late_bytes_per_step) << lpd.late_bytes_per_step;
  EXPECT_GE(lpd.late_bytes_per_step, 0.2 * sgd.late_bytes_per_step) << lpd.late_bytes_per_step;
}

class AlgorithmResume : public RunTest, public ::testing::WithParamInterface<std::string> {};

// The parameters a checkpoint's rank file holds (none when ranks share one model).
std::map<std::string, at::Tensor> rank_parameters(const fs::path& file) {
  std::map<std::string, at::Tensor> out;
  torch::serialize::InputArchive archive;
  archive.load_from(file.string());
  for (const char* name : {"layers.0.weight", "layers.0.bias", "layers.2.weight", "layers.2.bias"}) {
    at::Tensor t;
    if (archive.try_read(std::string("param.") + name, t)) out[name] = t;
  }
  return out;
}

// Rank 1 dies at step 13; the same command resumes from step 8 and must end
// with exactly the uninterrupted run's weights (for qadam, resuming after
// its switch to compressed momentum at step 5).
TEST_P(AlgorithmResume, AResumedRunEqualsAnUninterruptedOne) {
  const std::string& algorithm = GetParam();
  std::string extra, sets;
  if (algorithm == "shift_one") {
    extra = "algorithm: {name: decentralized, hierarchical: false, peer_selection_mode: shift_one, "
            "communication_interval: 3}\n";
  } else if (algorithm == "ignored_params") {
    sets = " --set 'model.ignore_params=[layers.2.bias]'";
  } else {
    const bagua::AlgorithmDescriptor& d = descriptor_of(algorithm);
    extra = "algorithm: {name: " + algorithm + (d.defaults.contains("hierarchical") ? ", hierarchical: false" : "") +
            "}\n";
    if (!d.traits.required_optimizer.empty()) {
      sets = " --set 'optimizers=[{type: " + d.traits.required_optimizer + ", lr: 0.002, warmup_steps: 5}]'";
    }
  }
  std::string recipe = write_recipe("resume", extra);
  RunOutcome clean = bagua_run(recipe + sets + " --set output.dir=" + (dir_ / "clean").string());
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  RunOutcome crashed = bagua_run(recipe + sets, "BAGUA_FAULT_AT_STEP=1:13");
  EXPECT_EQ(crashed.exit_code, 3) << crashed.output;
  RunOutcome resumed = bagua_run(recipe + sets);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 8"), std::string::npos) << resumed.output;
  double diff = max_abs_diff(model_parameters(dir_ / "resume" / "model.pt"),
                             model_parameters(dir_ / "clean" / "model.pt"));
  EXPECT_EQ(diff, 0.0) << "a resumed " << algorithm << " run must end with the uninterrupted run's weights";
  // Every rank's own weights too, from the final checkpoint's rank files
  // (present when ranks hold different weights).
  for (int r = 0; r < 2; ++r) {
    fs::path file = fs::path("checkpoints/step-00000024") / ("rank-" + std::to_string(r) + ".pt");
    auto resumed_own = rank_parameters(dir_ / "resume" / file), clean_own = rank_parameters(dir_ / "clean" / file);
    EXPECT_EQ(resumed_own.size(), clean_own.size()) << file;
    for (const auto& [name, t] : clean_own) {
      ASSERT_TRUE(resumed_own.count(name)) << name;
      EXPECT_TRUE(torch::equal(resumed_own.at(name), t)) << file << " " << name;
    }
  }
}

// Every synchronous algorithm (async below: it is not deterministic) but
// the recipe's own, gradient_allreduce, which resumes in "ignored_params";
// and decentralized's shift_one.
std::vector<std::string> resumed_runs() {
  std::vector<std::string> runs;
  for (const auto& d : bagua::algorithm_catalog()) {
    if (d.traits.synchronous && d.name != "gradient_allreduce") runs.push_back(d.name);
  }
  runs.push_back("shift_one");
  runs.push_back("ignored_params");
  return runs;
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AlgorithmResume, ::testing::ValuesIn(resumed_runs()),
                         [](const auto& info) { return info.param; });

// Async is not deterministic, but a resumed run must pick up and finish.
TEST_F(AlgorithmRun, AnAsyncRunResumesAfterACrash) {
  std::string recipe = write_recipe("async", "algorithm: {name: async, sync_interval_ms: 20, warmup_steps: 4}\n");
  RunOutcome crashed = bagua_run(recipe, "BAGUA_FAULT_AT_STEP=1:13");
  EXPECT_EQ(crashed.exit_code, 3) << crashed.output;
  RunOutcome resumed = bagua_run(recipe);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("done: 24 steps"), std::string::npos) << resumed.output;
}

}  // namespace

// GPU machines only (scripts/gpu-check.sh; CI has no GPU): every algorithm
// besides gradient_allreduce (covered in run_test.cpp) trains the quickstart
// on the GPU, two workers sharing it over Gloo (staged through pinned host
// memory; bytegrad and low_precision_decentralized compress with the CUDA
// kernel), and one worker over NCCL. One test per algorithm, so that ctest
// runs them side by side (all in one took over 4 minutes on an H200).
class AlgorithmOnTheGpu : public AlgorithmRun, public ::testing::WithParamInterface<std::string> {};

TEST_P(AlgorithmOnTheGpu, TrainsTheQuickstartOnOneAndTwoWorkers) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible (or a CPU build of LibTorch)";
  const std::string& name = GetParam();
  const std::string sets = one_machine_sets(name, {{"sync_interval_ms", 50}}, "lr: 0.001, warmup_steps: 100");
  for (int nproc : {1, 2}) {
    Quick q = quickstart(name + "-gpu" + std::to_string(nproc),
                         sets + " --set train.device=cuda --nproc-per-node " + std::to_string(nproc));
    EXPECT_GT(q.accuracy, 0.75) << name << " on " << nproc << " worker(s)";
  }
}

std::vector<std::string> algorithms_but_gradient_allreduce() {
  std::vector<std::string> names;
  for (const std::string& name : every_algorithm()) {
    if (name != "gradient_allreduce") names.push_back(name);  // run_test.cpp
  }
  return names;
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AlgorithmOnTheGpu, ::testing::ValuesIn(algorithms_but_gradient_allreduce()),
                         [](const auto& info) { return info.param; });
