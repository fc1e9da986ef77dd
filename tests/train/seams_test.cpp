// The trainer's parts, each alone: the stop vote, the non-finite guard and
// the metrics window, in this process on one rank and as two worker
// processes over real sockets (seams_scenarios.cpp).
#include "support/multiprocess.h"

#include "train/seams_support.h"

#include "train/allocator_policy.h"
#include "train/metrics_window.h"
#include "train/nonfinite_guard.h"
#include "train/progress_reporter.h"
#include "common/progress.h"
#include "train/stop_vote.h"

#include <bagua/communication.h>
#include <bagua/errors.h>
#include <bagua/system.h>

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <malloc.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace bagua::testing;

// A process group of this process alone.
void join_alone() {
  if (bagua::is_initialized()) return;
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(bagua::find_free_port()).c_str(), 1);
  bagua::init_process_group();
}

TEST(StopVote, AStopIsReadOneStepAfterItWasAsked) {
  join_alone();
  bagua::train::StopVote vote(gloo_twin(), /*synchronous=*/true);
  EXPECT_FALSE(vote.poll(false));
  EXPECT_FALSE(vote.poll(true)) << "this step reads the previous step's vote";
  EXPECT_TRUE(vote.poll(false)) << "the next step reads the stop";
  EXPECT_FALSE(vote.poll(false));
  vote.drain(gloo_twin());
  EXPECT_EQ(vote.votes_cast(), 4);
}

TEST(StopVote, SignalsSetTheFlagTheVoteCarries) {
  bagua::train::set_stop_requested_here(false);
  bagua::train::request_stop_on_signals();
  EXPECT_FALSE(bagua::train::stop_requested_here());
  std::raise(SIGTERM);
  EXPECT_TRUE(bagua::train::stop_requested_here());
  bagua::train::set_stop_requested_here(false);
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
}

TEST(StopVote, TwoRanksReadTheSameAnswerAtTheSameStep) {
  expect_all_checks_passed(run_workers("stop_vote_sync", 2), 2);
}

TEST(StopVote, AsynchronousRanksNeverWaitForEachOtherAndAgreeAtTheEnd) {
  expect_all_checks_passed(run_workers("stop_vote_async", 2), 2);
}

// Asynchronous ranks at different paces stop at one agreed step, with a
// control collective in between that both must meet (issue 26: each rank
// saved its own step, and one's evaluation met the other's checkpoint).
TEST(StopVote, AsynchronousRanksAgreeOnOneStepToStopAt) {
  expect_all_checks_passed(run_workers("stop_async_between", 2), 2);
  expect_all_checks_passed(run_workers("stop_async_at_collective", 2), 2);
}

// The watch (launch side) tells long phases from a training step's by the
// names the reporter (train side) sends: the two lists must agree.
TEST(ProgressPhases, OnlyStartUpCheckpointsEvaluationAndTheEndMayTakeLong) {
  using bagua::train::Phase;
  for (Phase p : {Phase::kStarting, Phase::kCheckpoint, Phase::kEvaluation, Phase::kFinishing}) {
    EXPECT_TRUE(bagua::progress::phase_may_take_long(bagua::train::phase_name(p))) << bagua::train::phase_name(p);
  }
  for (Phase p : {Phase::kData, Phase::kForward, Phase::kBackward, Phase::kOptimizer, Phase::kCoordination}) {
    EXPECT_FALSE(bagua::progress::phase_may_take_long(bagua::train::phase_name(p))) << bagua::train::phase_name(p);
  }
  const auto r = bagua::progress::decode(
      bagua::progress::encode({7, 20, 345, 1795000000123, "backward and gradient communication"}));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->collectives, 345);
  EXPECT_EQ(r->diverged_ms, 1795000000123);
  EXPECT_EQ(r->phase, "backward and gradient communication");
}

// train.allocator: tuned keeps a 64 MiB block out of mmap (glibc maps
// anything above 32 MiB by default, and a fresh mapping faults its pages in
// again every step); system and a user's own MALLOC_* setting leave glibc
// as it is. (Each test runs in a process of its own under ctest.)
TEST(AllocatorPolicy, TunedKeepsLargeBlocksInTheHeapAndAUsersSettingWins) {
  auto mapped_by = [](size_t bytes) {
    const size_t before = mallinfo2().hblks;
    void* volatile p = std::malloc(bytes);  // volatile: the compiler may not elide the pair
    static_cast<volatile char*>(p)[0] = 1;
    const size_t during = mallinfo2().hblks;
    std::free(p);
    return during > before;
  };
  const size_t big = size_t{64} << 20;
  EXPECT_TRUE(mapped_by(big)) << "glibc's default maps a 64 MiB block";
  EXPECT_EQ(bagua::train::apply_allocator_policy(false), "system (train.allocator)");
  EXPECT_TRUE(mapped_by(big));
  setenv("MALLOC_ARENA_MAX", "2", 1);
  EXPECT_EQ(bagua::train::apply_allocator_policy(true), "left as set by MALLOC_ARENA_MAX");
  unsetenv("MALLOC_ARENA_MAX");
  EXPECT_TRUE(mapped_by(big));
  EXPECT_EQ(bagua::train::apply_allocator_policy(true), "tuned");
  EXPECT_FALSE(mapped_by(big)) << "tuned: from the heap";
}

TEST(MetricsWindow, MeanLossRateBytesAndPaddingOfOneWindow) {
  bagua::train::MetricsWindow window(at::Device(at::kCPU), 1000);
  EXPECT_EQ(window.steps(), 0);
  bagua::Batch tokens;
  tokens.input = torch::zeros({4, 10}, torch::kLong);
  tokens.padding = 10;  // 10 of the 40 input elements
  window.add_loss(torch::tensor(2.0f));
  window.add_step(4, tokens);
  window.add_step(4, tokens);  // a skipped step: counted, no loss
  window.add_loss(torch::tensor(4.0f));
  window.add_step(4, tokens);
  EXPECT_EQ(window.steps(), 3);
  EXPECT_DOUBLE_EQ(window.loss_sum().item<double>(), 6.0);
  const auto f = window.close(1500, nullptr);
  EXPECT_DOUBLE_EQ(f.mean_loss, 2.0) << "6 over 3 steps";
  EXPECT_EQ(f.comm_bytes, 500);
  EXPECT_GT(f.samples_per_s, 0);
  ASSERT_TRUE(f.padding);
  EXPECT_DOUBLE_EQ(*f.padding, 0.25);
  const auto next = window.close(1500, nullptr);
  EXPECT_EQ(next.comm_bytes, 0);
  EXPECT_DOUBLE_EQ(next.mean_loss, 0.0);
  EXPECT_EQ(window.steps(), 0);
}

// The documented rule: more than 1.5 times the best earlier record and above
// the first; a run that only learns, or is noisy near its best, never
// trips it; non-finite losses are not counted.
TEST(DivergenceWatch, FlagsALossFarAboveItsBestAndAboveWhereItStarted) {
  bagua::train::DivergenceWatch steady;
  for (double loss : {2.3, 1.2, 0.8, 0.5, 0.9, 0.6, 0.45}) EXPECT_FALSE(steady.add(100, loss)) << loss;
  EXPECT_FALSE(steady.ever());

  bagua::train::DivergenceWatch near_zero;  // far above the best, but still below the first record
  for (double loss : {1.0, 0.01, 0.03, 0.5}) EXPECT_FALSE(near_zero.add(100, loss)) << loss;

  bagua::train::DivergenceWatch qadam;  // the 10%-accuracy QAdam run of issue 26, as it was logged
  EXPECT_FALSE(qadam.add(100, 1.1555));
  EXPECT_FALSE(qadam.add(150, std::numeric_limits<double>::quiet_NaN()));
  EXPECT_TRUE(qadam.add(200, 6.4e25));
  EXPECT_TRUE(qadam.add(300, 6.7e11));
  EXPECT_TRUE(qadam.ever());
  EXPECT_NE(qadam.first().find("step 200"), std::string::npos) << qadam.first();
  EXPECT_NE(qadam.first().find("1.1555 at step 100"), std::string::npos) << qadam.first();

  bagua::train::DivergenceWatch back_to_chance;  // finite, useless: back to ln(10)
  for (double loss : {1.9, 0.9, 0.7}) EXPECT_FALSE(back_to_chance.add(1, loss));
  EXPECT_TRUE(back_to_chance.add(1, 2.302));

  bagua::train::DivergenceWatch fine_tuning;  // starts low: noise above the first record is not enough
  for (double loss : {0.30, 0.25, 0.27, 0.32, 0.31}) EXPECT_FALSE(fine_tuning.add(1, loss)) << loss;
}

TEST(MetricsWindow, TwoRanksSumTheirWindows) { expect_all_checks_passed(run_workers("metrics_window", 2), 2); }

bagua::train::NonFiniteGuard guard(bagua::OnNonFinite mode, std::vector<std::string>* warnings) {
  join_alone();
  bagua::train::NonFiniteGuard::Options o;
  o.mode = mode;
  o.control = gloo_twin();
  return bagua::train::NonFiniteGuard(o, [warnings](const std::string& w) { warnings->push_back(w); });
}

std::vector<int64_t> batch(int) { return {3, 1, 4}; }

TEST(NonFiniteGuard, SkipStepSkipsOnlyNonFiniteStepsAndWarnsOnce) {
  std::vector<std::string> warnings;
  auto g = guard(bagua::OnNonFinite::kSkipStep, &warnings);
  const float inf = std::numeric_limits<float>::infinity();
  auto finite = param_with_grad(0.5f), infinite = param_with_grad(inf);
  EXPECT_FALSE(g.check_step(0, 0, torch::tensor(1.0f), finite, finite, batch));
  EXPECT_TRUE(g.check_step(1, 0, torch::tensor(1.0f), infinite, infinite, batch)) << "an infinite gradient";
  EXPECT_TRUE(g.check_step(2, 0, torch::tensor(std::nanf("")), finite, finite, batch)) << "a NaN loss";
  EXPECT_EQ(g.skips(), 2);
  ASSERT_EQ(warnings.size(), 1u) << "the first skip warns; the next at the 100th";
  EXPECT_NE(warnings[0].find("step 2:"), std::string::npos) << warnings[0];
}

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(NonFiniteGuard, StopNamesTheStepTheGradientAndTheSamples) {
  std::vector<std::string> warnings;
  join_alone();
  bagua::train::NonFiniteGuard::Options o;
  o.mode = bagua::OnNonFinite::kStop;
  o.control = gloo_twin();
  std::vector<int64_t> told;  // the divergence times the launcher is told (progress.h)
  o.diverged = [&told](int64_t ms) { told.push_back(ms); };
  bagua::train::NonFiniteGuard g(o, [&warnings](const std::string& w) { warnings.push_back(w); });
  auto bad = param_with_grad(std::nanf(""));
  const int64_t before = unix_ms();
  try {
    g.check_step(41, 2, torch::tensor(1.0f), bad, {}, batch);
    FAIL() << "no DivergedError";
  } catch (const bagua::DivergedError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("diverged at step 42 (epoch 3)"), std::string::npos) << m;
    EXPECT_NE(m.find("the gradient of layer.weight holds NaN or infinity on rank 0"), std::string::npos) << m;
    EXPECT_NE(m.find("training samples [3, 1, 4]"), std::string::npos) << m;
  }
  ASSERT_EQ(told.size(), 1u) << "told once, before the error";
  EXPECT_GE(told[0], before);
  EXPECT_LE(told[0], unix_ms());
  EXPECT_NO_THROW(g.check_window(50)) << "the window verdict is for GPUs only";
}

// GPU machines only: under stop the guard reads nothing per step on a GPU;
// it records the first step whose loss was not finite, and check_window()
// names that step (not the one where it was read).
TEST(NonFiniteGuard, RecordsTheFirstNonFiniteStepOnTheGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible (or a CPU build of LibTorch)";
  join_alone();
  bagua::train::NonFiniteGuard::Options o;
  o.mode = bagua::OnNonFinite::kStop;
  o.device = at::Device(at::kCUDA, 0);
  o.control = gloo_twin();
  std::vector<int64_t> told;
  o.diverged = [&told](int64_t ms) { told.push_back(ms); };
  bagua::train::NonFiniteGuard g(o, [](const std::string&) {});
  auto on_gpu = [](float v) { return torch::tensor(v).to(at::Device(at::kCUDA, 0)); };
  for (int64_t step = 0; step < 4; ++step) EXPECT_FALSE(g.check_step(step, 0, on_gpu(1.0f), {}, {}, batch));
  EXPECT_NO_THROW(g.check_window(4));
  EXPECT_FALSE(g.check_step(4, 0, on_gpu(1.0f), {}, {}, batch));
  const int64_t before_bad = unix_ms();
  EXPECT_FALSE(g.check_step(5, 0, on_gpu(std::nanf("")), {}, {}, batch));  // step 6
  const int64_t after_bad = unix_ms();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(g.check_step(6, 0, on_gpu(std::nanf("")), {}, {}, batch));
  EXPECT_FALSE(g.check_step(7, 0, on_gpu(1.0f), {}, {}, batch));
  try {
    g.check_window(8);
    FAIL() << "no DivergedError";
  } catch (const bagua::DivergedError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the training diverged at step 6: the loss was NaN or infinite on rank 0"), std::string::npos)
        << m;
    EXPECT_NE(m.find("here after step 8"), std::string::npos) << m;
    EXPECT_NE(m.find("Nothing was saved after step 4"), std::string::npos) << m;
  }
  // The launcher is told when step 6 ran, not when its verdict was read.
  ASSERT_EQ(told.size(), 1u);
  EXPECT_GE(told[0], before_bad);
  EXPECT_LE(told[0], after_bad);
}

TEST(NonFiniteGuard, TwoRanksSkipTogether) { expect_all_checks_passed(run_workers("guard_skip", 2), 2); }

TEST(NonFiniteGuard, TwoRanksNameTheRankWhoseLossWasNotFinite) {
  expect_all_checks_passed(run_workers("guard_stop_names_the_culprit", 2), 2);
}

}  // namespace
