// train.precision: fp16: dynamic loss scaling, as PyTorch's GradScaler does
// it, so that small gradients survive float16's narrow range.
//
// Contract:
//   - scaled(loss) is the loss times the current scale; backward runs on it,
//     so every gradient is `scale` times too large (and may overflow).
//   - after_backward() runs once a step, after the gradients were averaged
//     and before clipping and the optimizer. It reads the step's loss and
//     whether any gradient holds an infinity or a NaN (one host read), and
//     returns what the step does:
//       kStep: the gradients were divided by the scale in place; step.
//       kSkip: an overflow; the gradients are left, the caller skips the
//              step, and the scale is halved (backoff 0.5).
//       kLossNotFinite: the loss itself is not finite: a divergence, not an
//              overflow; the scale is left and train.on_nonfinite decides
//              (the caller's NonFiniteGuard).
//     After growth_interval kStep verdicts in a row the scale doubles.
//   - Every rank of a synchronous algorithm reaches the same verdict:
//     where the averaged gradients are the same on every rank
//     (kIdentical: gradient_allreduce, bytegrad) an overflow is
//     found alike everywhere, and only then do the ranks agree (allreduce)
//     on whether some rank's loss was not finite; where they differ
//     (kAgree: decentralized) one small allreduce a step agrees on both.
//     Asynchronous ranks (kAlone) decide alone: they never step together.
//   - qadam is refused with fp16 (recipe check): it folds each gradient
//     into its momentum during backward, while the gradient is still scaled.
//   - The scale starts at 2^16 (GradScaler's defaults throughout) and is
//     part of a checkpoint (state()/restore()), so a resumed run goes on
//     with the scale it had.
#pragma once

#include <bagua/communication.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace bagua::train {

class LossScaler {
 public:
  struct Options {
    double init_scale = 65536.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int64_t growth_interval = 2000;
    enum class Ranks { kIdentical, kAgree, kAlone } ranks = Ranks::kAlone;
    ProcessGroupPtr control;  // for the agreements (Gloo, CPU tensors)
  };
  struct State {
    double scale = 65536.0;
    int64_t growth_tracker = 0;  // steps in a row without an overflow
  };

  explicit LossScaler(Options options);

  at::Tensor scaled(const at::Tensor& loss) const { return loss * scale_; }

  enum class Verdict { kStep, kSkip, kLossNotFinite };
  // `loss`: the step's (unscaled) loss; `params`: every parameter.
  Verdict after_backward(const at::Tensor& loss, const std::vector<std::pair<std::string, at::Tensor>>& params);

  double scale() const { return scale_; }
  int64_t overflows() const { return overflows_; }  // steps skipped for an overflow so far, in this process

  State state() const { return {scale_, tracker_}; }
  void restore(const State& s) {
    scale_ = s.scale;
    tracker_ = s.growth_tracker;
  }

 private:
  Options options_;
  double scale_;
  int64_t tracker_ = 0;
  int64_t overflows_ = 0;
};

}  // namespace bagua::train
