#include "train/test_faults.h"

#include <ATen/ATen.h>

#include <csignal>
#include <chrono>
#include <cstdio>
#include <thread>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

namespace bagua::train {

namespace {
// VAR=RANK:STEP[,RANK:STEP...]: the step given for `rank`, if any.
std::optional<int64_t> step_for(const char* var, int rank) {
  const char* spec = std::getenv(var);
  if (spec == nullptr) return std::nullopt;
  for (const char* p = spec; *p != '\0';) {
    int at_rank = -1;
    long long at_step = -1;
    if (std::sscanf(p, "%d:%lld", &at_rank, &at_step) == 2 && at_rank == rank) return at_step;
    const char* comma = std::strchr(p, ',');
    if (comma == nullptr) break;
    p = comma + 1;
  }
  return std::nullopt;
}
}  // namespace

std::unique_ptr<TestFaults> TestFaults::from_environment(int rank) {
  auto faults = std::unique_ptr<TestFaults>(new TestFaults());
  faults->rank_ = rank;
  const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
  faults->restarted_ = restarts != nullptr && std::string(restarts) != "0";
  faults->kill_at_ = step_for("BAGUA_FAULT_AT_STEP", rank);
  faults->stop_at_ = step_for("BAGUA_STOP_AT_STEP", rank);
  faults->nan_at_ = step_for("BAGUA_NAN_AT_STEP", rank);
  faults->hang_at_ = step_for("BAGUA_HANG_AT_STEP", rank);
  faults->overflow_at_ = step_for("BAGUA_OVERFLOW_AT_STEP", rank);
  faults->diverged_hold_s_ = step_for("BAGUA_DIVERGED_HOLD", rank);
  if (!faults->kill_at_ && !faults->stop_at_ && !faults->nan_at_ && !faults->hang_at_ && !faults->overflow_at_ &&
      !faults->diverged_hold_s_)
    return nullptr;
  return faults;
}

void TestFaults::at_step_start(int64_t step) const {
  if (restarted_ || kill_at_ != step) return;
  std::fprintf(stderr, "BAGUA_FAULT_AT_STEP: rank %d kills itself at step %lld\n", rank_, static_cast<long long>(step));
  std::fflush(stderr);
  std::raise(SIGKILL);
}

void TestFaults::in_forward(int64_t step) const {
  if (!restarted_ && hang_at_ == step) {
    std::fprintf(stderr, "BAGUA_HANG_AT_STEP: rank %d hangs (its reporter goes on) at step %lld\n", rank_,
                 static_cast<long long>(step));
    std::fflush(stderr);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  if (restarted_ || stop_at_ != step) return;
  std::fprintf(stderr, "BAGUA_STOP_AT_STEP: rank %d stops itself (SIGSTOP) at step %lld\n", rank_,
               static_cast<long long>(step));
  std::fflush(stderr);
  std::raise(SIGSTOP);
}

at::Tensor TestFaults::on_loss(int64_t step, const at::Tensor& loss) const {
  if (nan_at_ != step) return loss;
  return loss * std::numeric_limits<float>::quiet_NaN();
}

void TestFaults::on_diverged() const {
  if (!diverged_hold_s_) return;
  std::fprintf(stderr, "BAGUA_DIVERGED_HOLD: rank %d waits %lld s before it leaves\n", rank_,
               static_cast<long long>(*diverged_hold_s_));
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::seconds(*diverged_hold_s_));
}

}  // namespace bagua::train
