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
//     would make the host wait for each backward): it records on the GPU,
//     without waiting, the first step whose loss was not finite on this
//     rank. check_window() reads that record where the host waits anyway
//     (log records, checkpoints, evaluations); the ranks of a synchronous
//     algorithm agree on it (one small allgather), so the error names the
//     first step and the rank whose loss it was, as on a CPU (a NaN on one
//     rank makes every rank's weights NaN a step later). Asynchronous ranks
//     judge alone.
//   - A sum per tensor clears almost every step (one vectorised pass, no
//     allocation); only a non-finite total runs the exact element check.
#pragma once

#include <bagua/communication.h>
#include <bagua/errors.h>
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
    // Called before a DivergedError under stop is thrown, with the wall-clock
    // time (ms since the Unix epoch) at which this rank computed its first
    // non-finite step (on a GPU, when that step was queued): the launcher
    // names the earliest of several diverged ranks (common/progress.h).
    std::function<void(int64_t unix_ms)> diverged;
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

  // The GPU's deferred verdict: throws DivergedError when a step's loss
  // was not finite (on any rank, for synchronous algorithms); `steps_done`
  // is the step reached. Collective on a GPU under stop (synchronous).
  void check_window(int64_t steps_done);

  // An algorithm found NaN weights in its own communication (on a GPU
  // under stop, before the deferred verdict was read): every rank that got
  // `found` calls this at the same step. Throws the verdict of
  // check_window(), which names the first step and rank, when there is
  // one; else rethrows `found`.
  [[noreturn]] void algorithm_found_divergence(const DivergedError& found, int64_t steps_done);

  // Steps skipped so far (skip_step).
  int64_t skips() const { return skips_; }

 private:
  Options options_;
  std::function<void(const std::string&)> warn_;
  int64_t skips_ = 0;
  int64_t clean_step_ = 0;  // on a GPU: the last step known finite
  // On a GPU under stop: the first step (1-based) whose loss was not
  // finite, or -1; the number of the step being checked, both on the GPU.
  at::Tensor first_bad_, step_on_device_;
  int64_t next_step_ = -1;  // the steps_done that step_on_device_ holds + 1 for
  // On a GPU under stop: (step, Unix ms when it was checked) of the steps
  // since the last clean verdict, so that a verdict can say when its first
  // bad step ran.
  std::vector<std::pair<int64_t, int64_t>> step_times_;
  void report_divergence(int64_t step) const;
};

}  // namespace bagua::train
