// Worker side of the trainer's parts on two ranks: the stop vote, the
// metrics window and the non-finite guard, each over a real process group.
#include "support/worker_checks.h"

#include "train/seams_support.h"

#include "train/metrics_window.h"
#include "train/nonfinite_guard.h"
#include "train/stop_vote.h"

#include <bagua/communication.h>
#include <bagua/errors.h>

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <iostream>
#include <thread>
#include <vector>

using bagua::testing::WorkerChecks;
using bagua::testing::gloo_twin;
using bagua::testing::param_with_grad;

namespace {

// Synchronous votes: rank 1 asks at its third poll; every rank reads the
// answer at the fourth, the same one.
int stop_vote_sync() {
  bagua::init_process_group();
  const int rank = bagua::get_rank();
  WorkerChecks c(rank);
  auto control = gloo_twin();
  bagua::train::StopVote vote(gloo_twin(), /*synchronous=*/true);
  int first_stop = -1;
  for (int poll = 0; poll < 6; ++poll) {
    const bool stop = vote.poll(rank == 1 && poll == 2);
    if (stop && first_stop < 0) first_stop = poll;
  }
  vote.drain(control);
  c.expect(first_stop == 3, "the stop asked at poll 2 is read at poll 3 on every rank (got " +
                                std::to_string(first_stop) + ")");
  c.expect(vote.votes_cast() == 6, "one vote per poll");
  return c.finish();
}

// Asynchronous votes: rank 0 polls slowly; the ranks never wait for each
// other, both see rank 1's stop (asked from its second poll on, as the
// signal flag stays set), and drain() matches their vote counts.
int stop_vote_async() {
  bagua::init_process_group();
  const int rank = bagua::get_rank();
  WorkerChecks c(rank);
  auto control = gloo_twin();
  bagua::train::StopVote vote(gloo_twin(), /*synchronous=*/false);
  bool saw = false;
  int polls = 0;
  const auto start = std::chrono::steady_clock::now();
  while (!saw && polls < 2000) {
    saw = vote.poll(rank == 1 && polls >= 1);
    ++polls;
    std::this_thread::sleep_for(std::chrono::milliseconds(rank == 0 ? 20 : 1));
  }
  vote.drain(control);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  c.expect(saw, "rank " + std::to_string(rank) + " saw the stop");
  c.expect(seconds < 30, "no rank waited for the other's pace");
  at::Tensor count = torch::tensor({static_cast<double>(vote.votes_cast())}, torch::kDouble);
  at::Tensor most = count.clone();
  bagua::allreduce(most, bagua::ReduceOp::MAX, control);
  c.expect(count.item<double>() == most.item<double>(), "after drain() every rank has cast as many votes");
  return c.finish();
}

// Asynchronous ranks agree where to stop: rank 0 steps slowly, rank 1
// fast and asks to stop at its step `ask`; every 7 steps both meet at a
// control collective (an evaluation's stand-in) that checks they are at the
// same step. Both must stop at the same step, never inside a collective
// the other skipped. `ask` 9 lands the stop between two collectives (rank 1
// waits at step 14 while rank 0 reads it), 14 at a collective.
int stop_vote_async_agree(int64_t ask) {
  bagua::init_process_group();
  const int rank = bagua::get_rank();
  WorkerChecks c(rank);
  auto control = gloo_twin();
  bagua::train::StopVote vote(gloo_twin(), /*synchronous=*/false);
  int64_t step = 0, stopped_at = -1;
  bool collectives_matched = true;
  while (step < 200) {
    const auto at = vote.poll_async(rank == 1 && step >= ask, step);
    if (at && step >= *at) {
      stopped_at = step;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(rank == 0 ? 15 : 1));
    ++step;
    if (step % 7 == 0) {
      vote.enter_collective(rank == 1 && step >= ask, step);
      at::Tensor steps = torch::tensor({static_cast<double>(step), -static_cast<double>(step)}, torch::kDouble);
      bagua::allreduce(steps, bagua::ReduceOp::MAX, control);
      if (steps[0].item<double>() != -steps[1].item<double>()) collectives_matched = false;
    }
  }
  vote.drain(control);
  c.expect(stopped_at >= ask, "rank " + std::to_string(rank) + " stopped at " + std::to_string(stopped_at) +
                                  ", not before the stop was asked at " + std::to_string(ask));
  c.expect(collectives_matched, "every control collective met both ranks at the same step");
  at::Tensor mine = torch::tensor({static_cast<double>(stopped_at), -static_cast<double>(stopped_at)}, torch::kDouble);
  bagua::allreduce(mine, bagua::ReduceOp::MAX, control);
  c.expect(mine[0].item<double>() == -mine[1].item<double>(),
           "both ranks stopped at the same step (this one at " + std::to_string(stopped_at) + ")");
  return c.finish();
}

// The window sums over the ranks: rank r adds losses r+1 and r+1.
int metrics_window() {
  bagua::init_process_group();
  const int rank = bagua::get_rank();
  WorkerChecks c(rank);
  auto control = gloo_twin();
  bagua::train::MetricsWindow window(at::Device(at::kCPU), 100);
  bagua::Batch batch;
  batch.input = torch::zeros({8, 4});
  for (int i = 0; i < 2; ++i) {
    window.add_loss(torch::tensor(static_cast<float>(rank + 1)));
    window.add_step(8, batch);
  }
  const auto f = window.close(160, control);
  c.expect(f.mean_loss == 1.5, "the mean over both ranks' steps (got " + std::to_string(f.mean_loss) + ")");
  c.expect(f.comm_bytes == 60, "bytes are this rank's counter's growth");
  c.expect(f.samples_per_s > 0, "samples per second counted");
  c.expect(!f.padding, "no padding figure for float inputs");
  const auto empty = window.close(160, control);
  c.expect(empty.mean_loss == 0 && empty.comm_bytes == 0, "close() started a new window");
  return c.finish();
}

bagua::train::NonFiniteGuard make_guard(bagua::OnNonFinite mode, const bagua::ProcessGroupPtr& control) {
  bagua::train::NonFiniteGuard::Options o;
  o.mode = mode;
  o.rank = bagua::get_rank();
  o.world = bagua::get_world_size();
  o.control = control;
  return bagua::train::NonFiniteGuard(o, [](const std::string& line) { std::cerr << line << std::endl; });
}

// skip_step: a NaN on rank 1 alone makes every rank skip the step.
int guard_skip() {
  bagua::init_process_group();
  const int rank = bagua::get_rank();
  WorkerChecks c(rank);
  auto guard = make_guard(bagua::OnNonFinite::kSkipStep, gloo_twin());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto params = param_with_grad(1.0f);
  auto batch_of = [](int r) { return std::vector<int64_t>{r * 10, r * 10 + 1}; };
  c.expect(!guard.check_step(0, 0, torch::tensor(0.5f), params, params, batch_of), "a finite step is kept");
  const bool skip = guard.check_step(1, 0, torch::tensor(rank == 1 ? nan : 0.5f), params, params, batch_of);
  c.expect(skip, "rank 1's NaN loss skips the step on rank " + std::to_string(rank) + " too");
  c.expect(guard.skips() == 1, "one step skipped");
  return c.finish();
}

// stop: a NaN loss on rank 1 makes the averaged gradient NaN on every rank;
// both ranks stop naming rank 1 and rank 1's samples.
int guard_stop_names_the_culprit() {
  bagua::init_process_group();
  const int rank = bagua::get_rank();
  WorkerChecks c(rank);
  auto guard = make_guard(bagua::OnNonFinite::kStop, gloo_twin());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto averaged = param_with_grad(nan);  // the same on every rank, as after an allreduce
  auto batch_of = [](int r) { return std::vector<int64_t>{r * 10, r * 10 + 1}; };
  c.expect_throws<bagua::DivergedError>(
      [&] { guard.check_step(6, 1, torch::tensor(rank == 1 ? nan : 0.5f), averaged, averaged, batch_of); },
      "at step 7 (epoch 2): the loss was nan on rank 1, which made every rank's averaged gradient non-finite. "
      "The batch of rank 1 held training samples [10, 11]",
      "every rank names rank 1");
  return c.finish();
}

}  // namespace

int run_scenario(const std::string& name) {
  return bagua::testing::dispatch_scenario(name, {{"stop_vote_sync", stop_vote_sync},
                                                  {"stop_vote_async", stop_vote_async},
                                                  {"metrics_window", metrics_window},
                                                  {"stop_async_between", [] { return stop_vote_async_agree(9); }},
                                                  {"stop_async_at_collective", [] { return stop_vote_async_agree(14); }},
                                                  {"guard_skip", guard_skip},
                                                  {"guard_stop_names_the_culprit", guard_stop_names_the_culprit}});
}
