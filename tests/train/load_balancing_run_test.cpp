// `bagua run` with the load_balancing sampler and variable-size batches:
// the shipped token recipe trains on 2 workers, takes exactly the steps the
// sampler gives, and a crashed run resumes mid-epoch to the uninterrupted
// run's weights.
#include <bagua/data.h>
#include <bagua/recipe.h>

#include "support/bagua_run.h"

#include <gtest/gtest.h>

#include <regex>

namespace {

using namespace bagua::testing;

TEST_F(RunTest, LoadBalancingBatchesWithinATokenBudgetTrainAndResumeExactly) {
  const std::string recipe = kSource + "/recipes/fashion-tokens-load-balancing.yaml";
  const std::string common = recipe + " --set train.epochs=2 --set checkpoint.every_steps=10 --set train.log_every_steps=10";

  // What the sampler gives 2 workers over 2 epochs, computed here.
  bagua::Recipe r = bagua::load_recipe(recipe);
  auto train = bagua::load_dataset(r.data.train, bagua::TargetKind::kClassIndex, bagua::load_options_for(r.data));
  auto sampler = bagua::make_sampler(r.data, *train, 2);
  const int64_t steps = sampler->num_batches(0) + sampler->num_batches(1);
  ASSERT_NE(sampler->num_batches(0), (1500 + 63) / 64) << "batches should be cut by the budget, not the count";

  RunOutcome clean = bagua_run(common + " --set output.dir=" + (dir_ / "clean").string());
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  const std::string log = read_file(dir_ / "clean" / "logs" / "rank-0.log");
  EXPECT_NE(log.find("sampler: load_balancing sampler on 'tokens'"), std::string::npos) << log;
  EXPECT_NE(log.find(std::to_string(steps) + " steps in all"), std::string::npos) << log;
  EXPECT_NE(clean.output.find("done: " + std::to_string(steps) + " steps"), std::string::npos) << clean.output;

  // Killed mid-epoch 1 (step 13 is past the checkpoint at step 10), then the
  // same command resumes from that checkpoint.
  const std::string out = " --set output.dir=" + (dir_ / "resumed").string();
  RunOutcome crashed = bagua_run(common + out, "BAGUA_FAULT_AT_STEP=1:13");
  ASSERT_EQ(crashed.exit_code, 3) << crashed.output;
  // Its batches are cut per rank: another world size cannot continue the
  // epoch mid-way, and the launcher says so before any worker starts.
  RunOutcome other = bagua_run(common + out + " --nproc-per-node 1");
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("(step 10, within epoch 1) was written by 2 workers, and data.sampler load_balancing "
                              "cuts an epoch's batches per rank, so the epoch cannot continue at 1: resume at 2 "
                              "workers (--nproc-per-node 2)"),
            std::string::npos)
      << other.output;
  EXPECT_EQ(other.output.find("failed with exit code"), std::string::npos) << "a worker started:\n" << other.output;
  RunOutcome resumed = bagua_run(common + out);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 10"), std::string::npos) << resumed.output;
  EXPECT_EQ(max_abs_diff(model_parameters(dir_ / "resumed" / "model.pt"), model_parameters(dir_ / "clean" / "model.pt")),
            0.0);
}

}  // namespace
