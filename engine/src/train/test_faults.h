// Faults a test can plant in a run, through the environment (docs/run.md,
// "Testing aids"): each variable is RANK:STEP, or several such separated by
// commas (one per rank), and fires when that rank reaches that step
// (0-based: steps done before it).
//
//   BAGUA_FAULT_AT_STEP  the rank kills itself (SIGKILL) as the step starts;
//                        not after a max_restarts restart
//   BAGUA_STOP_AT_STEP   the rank stops itself (SIGSTOP) in the forward
//                        pass, a frozen worker for the stall watch; not
//                        after a restart
//   BAGUA_NAN_AT_STEP    the rank's loss is NaN, so its gradients are too
//   BAGUA_OVERFLOW_AT_STEP  the rank's backward runs on its loss times 1e30
//                        (the loss itself stays as it was): under
//                        train.precision fp16 its gradients overflow
//   BAGUA_HANG_AT_STEP   the rank's main thread sleeps for ever in the
//                        forward pass while its progress reporter goes on
//                        (a hung driver call); not after a restart
//   BAGUA_DIVERGED_HOLD  RANK:SECONDS: once that rank's training diverged
//                        (on_nonfinite: stop) and it told its launcher, it
//                        waits SECONDS before it leaves (a slow teardown,
//                        so that a peer that diverged later exits first)
//
// TestFaults::from_environment() is null when none is set, so a production
// run pays one pointer test per hook.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>

namespace bagua::train {

class TestFaults {
 public:
  static std::unique_ptr<TestFaults> from_environment(int rank);

  void at_step_start(int64_t step) const;                  // BAGUA_FAULT_AT_STEP
  void in_forward(int64_t step) const;                     // BAGUA_STOP_AT_STEP, BAGUA_HANG_AT_STEP
  at::Tensor on_loss(int64_t step, const at::Tensor& loss) const;  // BAGUA_NAN_AT_STEP
  double backward_factor(int64_t step) const { return overflow_at_ == step ? 1e30 : 1.0; }  // BAGUA_OVERFLOW_AT_STEP
  void on_diverged() const;                                // BAGUA_DIVERGED_HOLD

 private:
  int rank_ = 0;
  bool restarted_ = false;  // a max_restarts restart (TORCHELASTIC_RESTART_COUNT > 0)
  std::optional<int64_t> kill_at_, stop_at_, nan_at_, hang_at_, overflow_at_, diverged_hold_s_;
};

}  // namespace bagua::train
