// Multi-process tests of ByteGrad and QAdam: real workers over real
// sockets, each checking itself against a reference of the same math.
#include "support/multiprocess.h"

#include <gtest/gtest.h>

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

TEST(Exactness, HierarchicalByteGradOnTwoSimulatedNodes) {
  expect_all_checks_passed(run_nodes("bytegrad_exact", 2, 2, "BAGUA_TEST_HIERARCHICAL=1"), 4);
}

TEST(Exactness, HierarchicalQAdamOnTwoSimulatedNodes) {
  expect_all_checks_passed(run_nodes("qadam_exact", 2, 2, "BAGUA_TEST_HIERARCHICAL=1"), 4);
}

TEST(QAdam, WarmUpIsBitwiseAdamWithGradientAllReduce) {
  expect_all_checks_passed(run_workers("qadam_warmup_is_adam", 2), 2);
}

TEST(ByteGrad, NonFiniteGradientsStopWithTheRankNamed) {
  expect_all_checks_passed(run_workers("bytegrad_nan", 2), 2);
}

}  // namespace
