// QAdam: Adam whose momentum, not the gradient, is communicated in 8 bits
// (Bagua's QAdamOptimizer and QAdamAlgorithm).
//
//   auto opt = std::make_shared<bagua::QAdamOptimizer>(model->parameters(),
//                                                      bagua::QAdamOptions(1e-3).warmup_steps(100));
//   auto ddp = bagua::with_bagua(*model, {opt}, std::make_shared<bagua::QAdamAlgorithm>(opt));
//
// Per parameter the optimizer keeps Adam's state: step t, momentum m,
// second moment v. Each step, t += 1 and g = grad (+ weight_decay * p):
//   while t < warmup_steps:  m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
//   always:  p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// The algorithm averages the gradients in full precision while the
// optimizer's step count is below warmup_steps (so these steps are exactly
// Adam on averaged gradients). When it reaches warmup_steps the module
// re-registers its tensors: from then on each rank updates m from its own
// gradient, m = b1 m + (1 - b1) g, during backward, and m is averaged across
// ranks with the 8-bit scatter-reduce of ByteGrad; v stays frozen at its
// warm-up value. As in Bagua, the step at t == warmup_steps updates neither
// m nor v (its averaged gradient is not used), and weight decay has no
// effect after warm-up.
#pragma once

#include <bagua/algorithms/algorithm.h>

#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>

#include <map>
#include <memory>
#include <tuple>
#include <vector>

namespace bagua {

struct QAdamOptions : public torch::optim::OptimizerCloneableOptions<QAdamOptions> {
  QAdamOptions(double lr = 1e-3);  // NOLINT: implicit, as LibTorch's options
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(int64_t, warmup_steps) = 100;
  typedef std::tuple<double, double> betas_t;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-8;
  TORCH_ARG(double, weight_decay) = 0;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct QAdamParamState : public torch::optim::OptimizerCloneableParamState<QAdamParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(at::Tensor, exp_avg);
  TORCH_ARG(at::Tensor, exp_avg_sq);

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

// Its momentum is the state QAdamAlgorithm averages (AveragedOptimizerState).
class QAdamOptimizer : public torch::optim::Optimizer, public AveragedOptimizerState {
 public:
  // Throws InvalidArgument for lr < 0, eps < 0, betas outside [0, 1) or
  // warmup_steps < 1 (a zero warm-up would freeze v at zero).
  QAdamOptimizer(std::vector<at::Tensor> params, QAdamOptions options = {});
  QAdamOptimizer(std::vector<torch::optim::OptimizerParamGroup> groups, QAdamOptions options = {});

  at::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  // The state of `param` (created, zeroed, when it has none yet).
  QAdamParamState& state_of(const at::Tensor& param);
  // Steps taken: the first parameter's step count (0 before any).
  int64_t step_count() const;
  int64_t warmup_steps() const;
  double beta1() const;

  // (parameter, exp_avg) of every parameter with state, once a step has
  // been taken (during the warm-up the momentum is made of averaged
  // gradients, so it agrees across ranks as well); empty before.
  std::vector<std::pair<at::Tensor, at::Tensor>> averaged_state() const override;

 private:
  void check_options(const QAdamOptions& options) const;
  // Scratch for the update's denominator, per parameter (not state: not saved).
  std::map<const void*, at::Tensor> denominators_;
};

// The algorithm of the optimizer above. hierarchical: as ByteGrad's (the
// momentum is averaged in full precision within a node, compressed across
// node leaders); it applies after warm-up only.
class QAdamAlgorithm : public KeywordAlgorithm {
 public:
  explicit QAdamAlgorithm(std::shared_ptr<QAdamOptimizer> optimizer, bool hierarchical = true);
  std::unique_ptr<AlgorithmImpl> reify(ProcessGroupPtr group) const override;

  const std::shared_ptr<QAdamOptimizer>& optimizer() const { return optimizer_; }

 private:
  std::shared_ptr<QAdamOptimizer> optimizer_;
};

}  // namespace bagua
