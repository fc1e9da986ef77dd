#include "train/stop_vote.h"

#include <torch/torch.h>

#include <atomic>
#include <csignal>

namespace bagua::train {

namespace {
std::atomic<bool> g_stop_requested{false};
std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);
  g_stop_requested = true;
}
}  // namespace

void request_stop_on_signals() {
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGUSR1, on_stop_signal);
}

bool stop_requested_here() { return g_stop_requested; }

int stop_signal_here() { return g_stop_signal; }

void set_stop_requested_here(bool stop) { g_stop_requested = stop; }

StopVote::StopVote(ProcessGroupPtr group, bool synchronous) : group_(std::move(group)), synchronous_(synchronous) {}

bool StopVote::poll(bool stop_here) {
  bool stop_now = false;
  if (pending_) {
    if (!synchronous_ && !work_.is_completed()) return false;
    stop_now = read().stop;
  }
  cast(stop_here);
  return stop_now;
}

std::optional<int64_t> StopVote::poll_async(bool stop_here, int64_t step) {
  if (stop_at_) return stop_at_;
  if (pending_) {
    if (!work_.is_completed()) return std::nullopt;
    if (read().stop) return agree(step);
  }
  cast(stop_here, /*away=*/true, step);
  return std::nullopt;
}

std::optional<int64_t> StopVote::enter_collective(bool stop_here, int64_t step) {
  if (synchronous_) return std::nullopt;
  if (stop_at_) return stop_at_;
  for (;;) {
    if (!pending_) cast(stop_here || stop_requested_here(), /*away=*/false, step);
    const Ballot b = read();
    if (b.stop) return agree(step);
    if (!b.anyone_away) return std::nullopt;
    stop_here = false;  // cast once; the flag is read again each time round
  }
}

void StopVote::cast(bool stop, bool away, int64_t step) {
  flag_ = torch::tensor({stop ? 1.0 : 0.0, away ? 1.0 : 0.0, static_cast<double>(step)}, torch::kDouble);
  work_ = allreduce_async(flag_, ReduceOp::MAX, group_);
  pending_ = true;
  ++votes_cast_;
}

StopVote::Ballot StopVote::read() {
  work_.wait();
  pending_ = false;
  const auto* v = flag_.data_ptr<double>();
  return Ballot{v[0] > 0, v[1] > 0, static_cast<int64_t>(v[2])};
}

// Every rank read the same stop in the same vote, and casts this one next.
int64_t StopVote::agree(int64_t step) {
  cast(false, false, step);
  stop_at_ = read().step;
  return *stop_at_;
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
