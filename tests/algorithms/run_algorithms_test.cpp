// ByteGrad and QAdam through `bagua run`: accuracy against their
// full-precision counterparts in the same test, bytes on the wire, and a
// crash-and-resume that ends bit for bit where an uninterrupted run does.
#include "support/bagua_run.h"

#include <gtest/gtest.h>

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

TEST_F(AlgorithmRun, ByteGradAndQAdamTrainAsWellWithAQuarterOfTheBytes) {
  Quick sgd = quickstart("gradient_allreduce", "");
  Quick bytegrad = quickstart("bytegrad", "--set 'algorithm={name: bytegrad, hierarchical: false}'");
  Quick adam = quickstart("adam", "--set 'optimizers=[{type: adam, lr: 0.001}]'");
  Quick qadam = quickstart("qadam", "--set 'optimizers=[{type: qadam, lr: 0.001, warmup_steps: 100}]' "
                                    "--set 'algorithm={name: qadam, hierarchical: false}'");
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

class AlgorithmResume : public RunTest, public ::testing::WithParamInterface<std::string> {};

// Rank 1 dies at step 13; the same command resumes from step 8 and must end
// with exactly the uninterrupted run's weights (for qadam, resuming after
// its switch to compressed momentum at step 5).
TEST_P(AlgorithmResume, AResumedRunEqualsAnUninterruptedOne) {
  const std::string& algorithm = GetParam();
  std::string extra = algorithm == "bytegrad"
                          ? "algorithm: {name: bytegrad, hierarchical: false}\n"
                          : "algorithm: {name: qadam, hierarchical: false}\n";
  std::string recipe = write_recipe("resume", extra);
  std::string sets = algorithm == "qadam" ? " --set 'optimizers=[{type: qadam, lr: 0.002, warmup_steps: 5}]'" : "";
  RunOutcome clean = bagua_run(recipe + sets + " --set output.dir=" + (dir_ / "clean").string());
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  RunOutcome crashed = bagua_run(recipe + sets, "BAGUA_FAULT_AT_STEP=1:13");
  EXPECT_EQ(crashed.exit_code, 3) << crashed.output;
  RunOutcome resumed = bagua_run(recipe + sets);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 8"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("final weights identical on all 2 workers"), std::string::npos) << resumed.output;
  double diff = max_abs_diff(model_parameters(dir_ / "resume" / "model.pt"),
                             model_parameters(dir_ / "clean" / "model.pt"));
  EXPECT_EQ(diff, 0.0) << "a resumed " << algorithm << " run must end with the uninterrupted run's weights";
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AlgorithmResume, ::testing::Values("bytegrad", "qadam"),
                         [](const auto& info) { return info.param; });

}  // namespace
