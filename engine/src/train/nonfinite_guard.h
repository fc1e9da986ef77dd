// train.on_nonfinite: what a NaN or infinite loss or gradient does to a run.
//
// Contract:
//   - check_step() runs after backward, before the optimizer step. It
//     returns true when the step must be skipped: under skip_step, when a
//     loss or gradient is not finite on any rank (one allreduce, so every
//     rank skips alike; asynchronous algorithms decide alone), with a
//     warning on the first skip and every 100th. Under stop it throws
//     DivergedError naming the step, the rank whose loss was not finite and
//     that rank's samples: when the averaged gradients are identical on
//     every rank, every rank finds the same NaN and they agree (allgather)
//     on whose loss it came from. Nothing is saved after that step.
//   - On a GPU under stop, check_step() reads nothing (a verdict every step
//     would make the host wait for each backward): check_window() gives the
//     verdict on the log window's loss sum, which a NaN or infinity
//     poisons, where the host waits anyway (log records, checkpoints,
//     evaluations), and the error says between which steps it happened.
//   - A sum per tensor clears almost every step (one vectorised pass, no
//     allocation); only a non-finite total runs the exact element check.
#pragma once

#include <bagua/communication.h>
#include <bagua/recipe_spec.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace bagua::train {

class NonFiniteGuard {
 public:
  using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

  struct Options {
    OnNonFinite mode = OnNonFinite::kStop;
    at::Device device{at::kCPU};
    bool replicas_identical = true;  // the algorithm's traits
    bool synchronous = true;
    int rank = 0;
    int world = 1;
    ProcessGroupPtr control;  // for the agreement collectives (Gloo, CPU)
    // State other than gradients that the algorithm averaged this step, as
    // (name, tensor) (AveragedOptimizerState): checked with the gradients,
    // and a non-finite one is the same on every rank. Null: none.
    std::function<NamedTensors()> averaged_state;
  };

  // `warn` prints a line for the user (rank 0's log).
  NonFiniteGuard(Options options, std::function<void(const std::string&)> warn);

  // `steps_done`: optimizer steps done before this one; `epoch` 0-based.
  // `params`: every parameter (their gradients are checked); `averaged`:
  // the parameters whose gradients the algorithm averaged
  // (BaguaModule::bagua_build_params()); `batch_of(rank)`: that rank's
  // sample indices of this step. Collective under skip_step (synchronous),
  // and when the averaged gradients are found non-finite.
  bool check_step(int64_t steps_done, int64_t epoch, const at::Tensor& loss, const NamedTensors& params,
                  const NamedTensors& averaged, const std::function<std::vector<int64_t>(int rank)>& batch_of);

  // The GPU's deferred verdict: throws DivergedError when `window_loss_sum`
  // is not finite; `steps_done` is the step reached.
  void check_window(const at::Tensor& window_loss_sum, int64_t steps_done);

  // Steps skipped so far (skip_step).
  int64_t skips() const { return skips_; }

 private:
  Options options_;
  std::function<void(const std::string&)> warn_;
  int64_t skips_ = 0;
  int64_t clean_step_ = 0;  // on a GPU: the last step known finite
};

}  // namespace bagua::train
