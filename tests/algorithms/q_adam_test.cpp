// QAdamOptimizer alone: the state its algorithm averages
// (AveragedOptimizerState), which the trainer checks with the gradients.
#include <bagua/algorithms/q_adam.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

TEST(QAdamOptimizer, ItsAveragedStateIsTheMomentumOnceItHasStepped) {
  auto a = torch::ones({3}, torch::requires_grad());
  auto b = torch::ones({2, 2}, torch::requires_grad());
  bagua::QAdamOptimizer opt({a, b}, bagua::QAdamOptions(0.1).warmup_steps(2));
  const bagua::AveragedOptimizerState& averaged = opt;
  EXPECT_TRUE(averaged.averaged_state().empty()) << "nothing before the first step";
  for (int step = 1; step <= 3; ++step) {  // through the warm-up and past it
    opt.zero_grad();
    (a.sum() + 2 * b.sum()).backward();
    opt.step();
    const auto state = averaged.averaged_state();
    ASSERT_EQ(state.size(), 2u) << "step " << step;
    EXPECT_TRUE(state[0].first.is_same(a));
    EXPECT_TRUE(state[1].first.is_same(b));
    EXPECT_TRUE(state[0].second.is_same(opt.state_of(a).exp_avg())) << "the momentum itself, not a copy";
    EXPECT_TRUE(state[1].second.is_same(opt.state_of(b).exp_avg()));
  }
}

}  // namespace
