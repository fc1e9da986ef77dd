// No algorithm allocates model-sized memory in a steady-state step (a
// fresh allocation that large page-faults in again wherever the allocator
// gives big blocks back, and cost decentralized 17,000 faults a step on a
// 20 M-parameter model). Each cell is a real `bagua run` of 2 workers on
// the 784-256-256-10 MLP with BAGUA_COUNT_ALLOCATIONS set one byte above
// its largest parameter: autograd's own gradients stay below that; a
// bucket's copy (the whole model here, 1,077,288 bytes) does not.
#include "support/algorithm_cells.h"
#include "support/bagua_run.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <tuple>
#include <vector>

namespace bagua::testing {
namespace {

constexpr int64_t kLargestParameter = 784 * 256 * 4;  // mlp_deep's first weight, bytes

// The algorithm and optimizer (--set arguments), one machine. Algorithms
// that switch phases after a warm-up (async's warmup_steps, a required
// optimizer's: qadam's) rebuild the buckets once (with rank 0's state
// broadcast): in step 2, before counting starts.
std::string allocation_cell_sets(const std::string& algorithm, bool fused) {
  std::string sets =
      one_machine_sets(algorithm, {{"sync_interval_ms", 5}, {"warmup_steps", 1}}, "lr: 0.001, warmup_steps: 1");
  if (fused && descriptor_of(algorithm).traits.required_optimizer.empty()) {
    sets += " --set 'optimizers=[{type: sgd, lr: 0.05, momentum: 0.9, fused: true}]'";
  }
  return sets;
}

// Every algorithm, then two with a fused optimizer: full precision and
// compressed.
std::vector<std::tuple<std::string, bool>> allocation_cells() {
  std::vector<std::tuple<std::string, bool>> cells;
  for (const auto& name : every_algorithm()) cells.emplace_back(name, false);
  cells.emplace_back("gradient_allreduce", true);
  cells.emplace_back("bytegrad", true);
  return cells;
}

// Each rank's count from its log.
std::vector<int64_t> steady_state_counts(const fs::path& out, const std::string& context) {
  std::vector<int64_t> found;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = read_file(out / "logs" / ("rank-" + std::to_string(rank) + ".log"));
    std::smatch m;
    EXPECT_TRUE(std::regex_search(log, m, std::regex("steady-state steps \\(3 to 16\\): ([0-9]+)")))
        << "rank " << rank << "\n" << log << "\n" << context;
    found.push_back(m.empty() ? -1 : std::stoll(m[1]));
  }
  return found;
}

using AllocationCell = std::tuple<std::string, bool>;  // algorithm, fused optimizer

class SteadyState : public RunTest, public ::testing::WithParamInterface<AllocationCell> {};

TEST_P(SteadyState, AllocatesNothingModelSized) {
  const auto& [algorithm, fused] = GetParam();
  const std::string recipe = write_recipe("cell", "", "tests/fixtures/models/mlp_deep.pt") +
                             allocation_cell_sets(algorithm, fused) + " --set train.max_steps=16 --set train.eval_every=never";
  RunOutcome r = bagua_run(recipe, "BAGUA_COUNT_ALLOCATIONS=" + std::to_string(kLargestParameter + 1));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(steady_state_counts(dir_ / "cell", r.output), (std::vector<int64_t>{0, 0})) << r.output;
}

INSTANTIATE_TEST_SUITE_P(EveryAlgorithm, SteadyState, ::testing::ValuesIn(allocation_cells()),
                         [](const ::testing::TestParamInfo<AllocationCell>& info) {
                           return std::get<0>(info.param) + (std::get<1>(info.param) ? "_fused" : "");
                         });

// The counter itself counts: at a threshold of one byte every step's
// tensors are counted, so the zeros above are not the counter's silence.
TEST_F(RunTest, AllocationCounterCountsWhatItSees) {
  const std::string recipe = write_recipe("cell", "", "tests/fixtures/models/mlp_deep.pt") +
                             " --set train.max_steps=16 --set train.eval_every=never";
  RunOutcome r = bagua_run(recipe, "BAGUA_COUNT_ALLOCATIONS=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int64_t c : steady_state_counts(dir_ / "cell", r.output)) EXPECT_GT(c, 14 * 10) << r.output;
}

}  // namespace
}  // namespace bagua::testing
