#include "train/loss_scaler.h"

#include <torch/torch.h>

#include <cmath>

namespace bagua::train {

LossScaler::LossScaler(Options options) : options_(std::move(options)), scale_(options_.init_scale) {}

LossScaler::Verdict LossScaler::after_backward(const at::Tensor& loss,
                                               const std::vector<std::pair<std::string, at::Tensor>>& params) {
  using Ranks = Options::Ranks;
  std::vector<at::Tensor> grads;
  for (const auto& [name, p] : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  // A sum is not finite when a term is not (or when the terms overflow it,
  // which at these magnitudes is an overflow too): one pass per tensor, and
  // the loss and the gradients' total read back together.
  std::vector<at::Tensor> sums;
  sums.reserve(grads.size());
  for (const auto& g : grads) sums.push_back(g.sum().to(at::kDouble));
  at::Tensor total = sums.empty() ? at::zeros({}, loss.options().dtype(at::kDouble)) : at::stack(sums).sum();
  const at::Tensor both = at::stack({loss.detach().sum().to(at::kDouble), total}).to(at::kCPU);
  bool loss_bad = !std::isfinite(both[0].item<double>());
  bool overflow = !std::isfinite(both[1].item<double>());
  auto agree_max = [&](std::vector<float> flags) {
    at::Tensor t = torch::tensor(flags);
    allreduce(t, ReduceOp::MAX, options_.control);
    return t;
  };
  if (options_.control && options_.ranks == Ranks::kAgree) {
    const at::Tensor t = agree_max({overflow && !loss_bad ? 1.0f : 0.0f, loss_bad ? 1.0f : 0.0f});
    overflow = t[0].item<float>() > 0;
    loss_bad = t[1].item<float>() > 0;
  } else if (options_.control && options_.ranks == Ranks::kIdentical && overflow) {
    // Every rank is here: the averaged gradients are the same everywhere.
    loss_bad = agree_max({loss_bad ? 1.0f : 0.0f})[0].item<float>() > 0;
  }
  if (loss_bad) return Verdict::kLossNotFinite;
  if (overflow) {
    ++overflows_;
    scale_ *= options_.backoff_factor;
    tracker_ = 0;
    return Verdict::kSkip;
  }
  if (!grads.empty()) at::_foreach_mul_(grads, 1.0 / scale_);
  if (++tracker_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    tracker_ = 0;
  }
  return Verdict::kStep;
}

}  // namespace bagua::train
