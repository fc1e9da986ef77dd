// `bagua run` with `optimizers[].fused: true`: the real binary and 2 workers
// end with the very weights of the unfused run, under every algorithm that
// can take a fused optimizer (all but qadam; async only trains, as it is not
// deterministic), and resume from a checkpoint, fused or unfused, to the
// weights of an uninterrupted run.
#include "support/bagua_run.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;

namespace {

using namespace bagua::testing;

std::string optimizer(bool fused) {
  return std::string(" --set 'optimizers=[{type: adam, lr: 0.002, weight_decay: 0.001, fused: ") +
         (fused ? "true" : "false") + "}]'";
}

// The 7x7 thumbnails and their 49-64-10 MLP: a run starts in a fraction of
// the time Fashion-MNIST's full images take to load, which is most of a run.
class FusedRunTest : public RunTest {
 protected:
  std::string recipe(const std::string& name, const std::string& algorithm, int steps) {
    fs::path path = dir_ / (name + ".yaml");
    std::ofstream(path) << "name: " << name << "\n"
                        << "model: {torchscript: " << BAGUA_SOURCE_DIR << "/recipes/models/mlp49.pt, loss: cross_entropy}\n"
                        << "data:\n"
                        << "  train: {format: csv, path: " << BAGUA_SOURCE_DIR
                        << "/recipes/data/fashion-thumbnails-train.csv, target_column: label}\n"
                        << "  batch_size: 16\n"
                        << "algorithm: {name: " << algorithm << "}\n"
                        << "distributed: {nproc_per_node: 2}\n"
                        << "train: {epochs: 1, max_steps: " << steps << ", log_every_steps: 4, eval_every: never, threads: 1}\n"
                        << "checkpoint: {every_steps: 8, keep: 2}\n"
                        << "output: {dir: " << (dir_ / name).string() << "}\n";
    return path.string();
  }
  std::vector<at::Tensor> weights(const std::string& run) { return model_parameters(dir_ / run / "model.pt"); }
};

TEST_F(FusedRunTest, FusedRunsEndWithTheUnfusedWeightsUnderTheOtherAlgorithms) {
  for (const std::string algorithm : {"bytegrad", "decentralized", "low_precision_decentralized"}) {
    RunOutcome unfused = bagua_run(recipe(algorithm + "_unfused", algorithm, 8) + optimizer(false));
    ASSERT_EQ(unfused.exit_code, 0) << unfused.output;
    RunOutcome fused = bagua_run(recipe(algorithm + "_fused", algorithm, 8) + optimizer(true));
    ASSERT_EQ(fused.exit_code, 0) << fused.output;
    EXPECT_EQ(max_abs_diff(weights(algorithm + "_fused"), weights(algorithm + "_unfused")), 0.0)
        << algorithm << ": a fused optimizer must give the unfused optimizer's weights bit for bit";
  }
}

// async averages on its own clock, so two runs differ anyway: a fused run
// trains (the loss falls) and finishes.
TEST_F(FusedRunTest, AFusedOptimizerTrainsUnderAsync) {
  RunOutcome r = bagua_run(recipe("async", "async", 16) + optimizer(true));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  double first = -1, last = -1;
  for (const auto& j : metrics(dir_ / "async" / "metrics.jsonl")) {
    if (!j.contains("loss")) continue;
    if (first < 0) first = j["loss"];
    last = j["loss"];
  }
  EXPECT_LT(last, first) << r.output;
}

// gradient_allreduce: a fused run killed at step 11 resumes from its step-8
// checkpoint to the weights of an uninterrupted unfused run; the same
// checkpoint resumed with the optimizer unfused gives them too (checkpoints
// hold one state per parameter either way).
TEST_F(FusedRunTest, AFusedRunEqualsTheUnfusedRunAndResumesBitwiseFusedOrUnfused) {
  RunOutcome clean = bagua_run(recipe("unfused", "gradient_allreduce", 16) + optimizer(false));
  ASSERT_EQ(clean.exit_code, 0) << clean.output;

  const std::string fused_recipe = recipe("fused", "gradient_allreduce", 16);
  RunOutcome crashed = bagua_run(fused_recipe + optimizer(true), "BAGUA_FAULT_AT_STEP=1:11");
  ASSERT_EQ(crashed.exit_code, 3) << crashed.output;
  fs::copy(dir_ / "fused", dir_ / "fused_then_unfused", fs::copy_options::recursive);

  RunOutcome resumed = bagua_run(fused_recipe + optimizer(true));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 8"), std::string::npos) << resumed.output;
  EXPECT_EQ(max_abs_diff(weights("fused"), weights("unfused")), 0.0);

  RunOutcome unfused = bagua_run(fused_recipe + optimizer(false) + " --set output.dir=" +
                                 (dir_ / "fused_then_unfused").string());
  ASSERT_EQ(unfused.exit_code, 0) << unfused.output;
  EXPECT_NE(unfused.output.find("at step 8"), std::string::npos) << unfused.output;
  EXPECT_EQ(max_abs_diff(weights("fused_then_unfused"), weights("unfused")), 0.0);
}

}  // namespace
