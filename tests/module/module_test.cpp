// Multi-process tests of BaguaModule with GradientAllReduce: real workers
// over real sockets, each checking itself against a local reference.
#include "support/multiprocess.h"

#include <gtest/gtest.h>

namespace {

using namespace bagua::testing;

class Equivalence : public ::testing::TestWithParam<int> {};

TEST_P(Equivalence, NRanksAtBatchBEqualOneRankAtBatchNB) {
  int world = GetParam();
  expect_all_checks_passed(run_workers("equivalence", world), world);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Equivalence, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(Equivalence, HierarchicalOnTwoSimulatedNodes) {
  expect_all_checks_passed(run_nodes("equivalence", 2, 2, "BAGUA_TEST_HIERARCHICAL=1"), 4);
}

TEST(BaguaModule, IgnoredParametersStayLocal) { expect_all_checks_passed(run_workers("ignore", 2), 2); }

TEST(BaguaModule, ParametersAndOptimizerStateEqualAfterWithBagua) {
  expect_all_checks_passed(run_workers("initial_state", 3), 3);
}

TEST(BaguaModule, RanksWrappingDifferentModelsAreNamedOnEveryRank) {
  expect_all_checks_passed(run_workers("different_models", 3), 3);
}

TEST(BaguaModule, UnusedParameterIsNamedInsteadOfHanging) {
  // A hang would last the whole collective timeout; a named error comes
  // well before it (start-up alone took 25 s under TSan on a busy machine).
  auto o = run_workers("unused", 2, {{"BAGUA_TIMEOUT_S", "60"}});
  expect_all_checks_passed(o, 2);
  EXPECT_LT(o.seconds, 60.0);
}

TEST(BaguaModule, FirstBucketIsCommunicatedBeforeBackwardEnds) {
  expect_all_checks_passed(run_workers("overlap", 2), 2);
}

TEST(BaguaModule, WorldOfOneSendsNothingAndStartsNoThread) {
  expect_all_checks_passed(run_workers("alone", 1), 1);
}

TEST(BaguaModule, ALayerBackwardSkipsStepsAsIfItsGradientWereZeroed) {
  expect_all_checks_passed(run_workers("skipped_layer", 1), 1);
}

TEST(BaguaModule, SwitchingAlgorithmReplacesHooksAndBuckets) {
  expect_all_checks_passed(run_workers("switch", 2), 2);
}

// The C++ example of docs/training.md, as a user would run it.
TEST(Example, WithBaguaExampleTrainsOnTwoWorkers) {
  std::string out = "/tmp/bagua-example-" + std::to_string(getpid());
  std::string cmd = std::string(BAGUA_CLI) + " launch --nproc-per-node 2 -- " + BAGUA_BINARY_DIR +
                    "/examples/with_bagua > " + out + " 2>&1";
  int code = std::system(cmd.c_str());
  std::string text = slurp(out);
  unlink(out.c_str());
  EXPECT_EQ(code, 0) << text;
  EXPECT_NE(text.find("[rank 0] all ranks hold identical weights"), std::string::npos) << text;
  // The loss at step 200 is below the loss at step 50 on rank 0.
  auto loss_at = [&](int step) {
    std::string key = "[rank 0] step " + std::to_string(step) + " loss ";
    auto pos = text.find(key);
    return pos == std::string::npos ? -1.0 : std::stod(text.substr(pos + key.size()));
  };
  EXPECT_GT(loss_at(50), 0.0) << text;
  EXPECT_LT(loss_at(200), loss_at(50)) << text;
}

}  // namespace
