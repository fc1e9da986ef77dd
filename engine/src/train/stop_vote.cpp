#include "train/stop_vote.h"

#include <torch/torch.h>

#include <atomic>
#include <csignal>

namespace bagua::train {

namespace {
std::atomic<bool> g_stop_requested{false};
extern "C" void on_stop_signal(int) { g_stop_requested = true; }
}  // namespace

void request_stop_on_signals() {
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
}

bool stop_requested_here() { return g_stop_requested; }

void set_stop_requested_here(bool stop) { g_stop_requested = stop; }

StopVote::StopVote(ProcessGroupPtr group, bool synchronous) : group_(std::move(group)), synchronous_(synchronous) {}

bool StopVote::poll(bool stop_here) {
  bool stop_now = false;
  if (pending_) {
    if (!synchronous_ && !work_.is_completed()) return false;
    work_.wait();
    pending_ = false;
    stop_now = flag_.item<double>() > 0;
  }
  cast(stop_here);
  return stop_now;
}

void StopVote::cast(bool stop) {
  flag_ = torch::tensor({stop ? 1.0 : 0.0}, torch::kDouble);
  work_ = allreduce_async(flag_, ReduceOp::MAX, group_);
  pending_ = true;
  ++votes_cast_;
}

// At the end the ranks may have cast different numbers of votes (an async
// rank casts its next only when its last is complete, so a rank can be one
// ahead); they agree on the largest count and the others catch up, so every
// vote completes.
void StopVote::drain(const ProcessGroupPtr& control) {
  at::Tensor most = torch::tensor({static_cast<double>(votes_cast_)}, torch::kDouble);
  allreduce(most, ReduceOp::MAX, control);
  while (votes_cast_ < static_cast<int64_t>(most.item<double>())) cast(false);
  if (pending_) work_.wait();
  pending_ = false;
}

}  // namespace bagua::train
