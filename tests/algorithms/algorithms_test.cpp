// Multi-process tests of ByteGrad and QAdam: real workers over real
// sockets, each checking itself against a reference of the same math.
#include "support/multiprocess.h"

#include <gtest/gtest.h>

#include <string>

namespace {

using namespace bagua::testing;

class Exactness : public ::testing::TestWithParam<int> {};

TEST_P(Exactness, ByteGradEqualsItsReferenceBitForBit) {
  expect_all_checks_passed(run_workers("bytegrad_exact", GetParam()), GetParam());
}

TEST_P(Exactness, QAdamEqualsItsReferenceBitForBitAfterTheWarmUp) {
  expect_all_checks_passed(run_workers("qadam_exact", GetParam()), GetParam());
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Exactness, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// The alltoalls cut into pieces (here of 16 bytes a slot, so every
// bucket's are): the same bytes arrive, so the same bits.
TEST(Exactness, ByteGradWithItsAlltoallsInPiecesEqualsItsReference) {
  expect_all_checks_passed(run_workers("bytegrad_exact", 3, {{"BAGUA_ALLTOALL_PIECE_BYTES", "16"}}), 3);
}

TEST(Exactness, HierarchicalByteGradOnTwoSimulatedNodes) {
  expect_all_checks_passed(run_nodes("bytegrad_exact", 2, 2, "BAGUA_TEST_HIERARCHICAL=1"), 4);
}

TEST(Exactness, HierarchicalQAdamOnTwoSimulatedNodes) {
  expect_all_checks_passed(run_nodes("qadam_exact", 2, 2, "BAGUA_TEST_HIERARCHICAL=1"), 4);
}

TEST(QAdam, WarmUpIsBitwiseAdamWithGradientAllReduce) {
  expect_all_checks_passed(run_workers("qadam_warmup_is_adam", 2), 2);
}

TEST(ByteGrad, NonFiniteGradientsArriveAsNaNOnEveryRankAndTheNextStepIsOrdinary) {
  expect_all_checks_passed(run_workers("bytegrad_nan", 2), 2);
}

// Decentralized at world sizes 2 and 4, both peer selection modes, every
// step and every third step.
struct DecentralizedCase {
  int world;
  std::string mode;
  int interval;
};

class DecentralizedExactness : public ::testing::TestWithParam<DecentralizedCase> {};

TEST_P(DecentralizedExactness, EqualsItsReferenceBitForBit) {
  const auto& p = GetParam();
  expect_all_checks_passed(run_workers("decentralized_exact", p.world,
                                       {{"BAGUA_TEST_MODE", p.mode}, {"BAGUA_TEST_INTERVAL", std::to_string(p.interval)}}),
                           p.world);
}

INSTANTIATE_TEST_SUITE_P(Cases, DecentralizedExactness,
                         ::testing::Values(DecentralizedCase{2, "all", 1}, DecentralizedCase{4, "all", 1},
                                           DecentralizedCase{2, "shift_one", 1}, DecentralizedCase{4, "shift_one", 1},
                                           DecentralizedCase{4, "all", 3}, DecentralizedCase{4, "shift_one", 3}),
                         [](const auto& info) {
                           return info.param.mode + "_world" + std::to_string(info.param.world) + "_interval" +
                                  std::to_string(info.param.interval);
                         });

TEST(DecentralizedExactness, HierarchicalOnTwoSimulatedNodes) {
  for (const char* mode : {"all", "shift_one"}) {
    expect_all_checks_passed(
        run_nodes("decentralized_exact", 2, 2, std::string("BAGUA_TEST_HIERARCHICAL=1 BAGUA_TEST_MODE=") + mode), 4);
  }
}

class LowPrecisionDecentralizedExactness : public ::testing::TestWithParam<int> {};

TEST_P(LowPrecisionDecentralizedExactness, EqualsItsReferenceBitForBit) {
  expect_all_checks_passed(run_workers("low_precision_decentralized_exact", GetParam()), GetParam());
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, LowPrecisionDecentralizedExactness, ::testing::Values(2, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// In a ring of two R is L, kept once; a checkpoint with them apart parts them.
TEST(LowPrecisionDecentralizedReplicas, RingsOfTwoKeepOneAndACheckpointPartsThem) {
  for (int world : {2, 3}) {
    expect_all_checks_passed(run_workers("low_precision_decentralized_replicas", world), world);
  }
}

TEST(LowPrecisionDecentralizedExactness, EveryOtherStep) {
  expect_all_checks_passed(run_workers("low_precision_decentralized_exact", 3, {{"BAGUA_TEST_INTERVAL", "2"}}), 3);
}

// The async tests are bounded: a hang fails them (the launcher's timeout
// and the test's own clock), it does not stall CI.
TEST(Async, AbortAndResumeRepeatedNeverHang) {
  auto o = run_workers("async_abort_resume", 3, {{"BAGUA_TIMEOUT_S", "30"}});
  expect_all_checks_passed(o, 3);
  EXPECT_LT(o.seconds, 60.0);
}

TEST(Async, ARankThatFinishedEarlyWaitsForTheOthersInAbort) {
  auto o = run_workers("async_one_rank_finished", 2, {{"BAGUA_TIMEOUT_S", "30"}});
  expect_all_checks_passed(o, 2);
  EXPECT_LT(o.seconds, 60.0);
}

TEST(Async, DestroyingTheModuleStopsTheBackgroundThread) {
  auto o = run_workers("async_destroy_without_abort", 2, {{"BAGUA_TIMEOUT_S", "30"}});
  expect_all_checks_passed(o, 2);
  EXPECT_LT(o.seconds, 60.0);
}

}  // namespace
