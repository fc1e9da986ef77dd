#include "train/components.h"

#include <bagua/algorithms/registry.h>
#include <bagua/distributed.h>
#include <bagua/errors.h>
#include <bagua/fused_optimizer.h>

#include <torch/nn/functional/loss.h>
#include <torch/optim.h>

#include <cmath>

namespace bagua::train {

bool is_sequence_output(const at::Tensor& output, const at::Tensor& target) {
  return output.dim() >= 3 && target.dim() == output.dim() - 1 && output.sizes().slice(0, target.dim()) == target.sizes();
}

at::Tensor compute_loss(Loss loss, const at::Tensor& output, const at::Tensor& target) {
  namespace F = torch::nn::functional;
  auto like_output = [&] { return target.numel() == output.numel() ? target.view_as(output) : target; };
  switch (loss) {
    case Loss::kCrossEntropy:
      if (is_sequence_output(output, target)) return F::cross_entropy(output.flatten(0, -2), target.flatten());
      return F::cross_entropy(output, target);
    case Loss::kNll:
      if (is_sequence_output(output, target)) return F::nll_loss(output.flatten(0, -2), target.flatten());
      return F::nll_loss(output, target);
    case Loss::kMse: return F::mse_loss(output, like_output());
    case Loss::kL1: return F::l1_loss(output, like_output());
    case Loss::kBceWithLogits: return F::binary_cross_entropy_with_logits(output, like_output());
    case Loss::kModel: break;
  }
  throw InvalidArgument("compute_loss: loss 'model' is computed by the model itself");
}

namespace {
std::shared_ptr<torch::optim::Optimizer> make_one(const OptimizerSpec& s, std::vector<at::Tensor> params) {
  using namespace torch::optim;
  if (auto own = make_algorithm_optimizer(to_string(s.type), params, s)) return own;  // an algorithm's optimizer
  switch (s.type) {
    case OptimizerType::kSgd:
      return std::make_shared<SGD>(params, SGDOptions(s.lr).momentum(s.momentum).dampening(s.dampening)
                                               .weight_decay(s.weight_decay).nesterov(s.nesterov));
    case OptimizerType::kAdam:
      return std::make_shared<Adam>(params, AdamOptions(s.lr).betas({s.betas[0], s.betas[1]}).eps(s.eps)
                                                .weight_decay(s.weight_decay).amsgrad(s.amsgrad));
    case OptimizerType::kAdamW:
      return std::make_shared<AdamW>(params, AdamWOptions(s.lr).betas({s.betas[0], s.betas[1]}).eps(s.eps)
                                                 .weight_decay(s.weight_decay).amsgrad(s.amsgrad));
    case OptimizerType::kRmsprop:
      return std::make_shared<RMSprop>(params, RMSpropOptions(s.lr).alpha(s.alpha).eps(s.eps)
                                                   .weight_decay(s.weight_decay).momentum(s.momentum)
                                                   .centered(s.centered));
    case OptimizerType::kAdagrad:
      return std::make_shared<Adagrad>(params, AdagradOptions(s.lr).lr_decay(s.lr_decay)
                                                   .weight_decay(s.weight_decay)
                                                   .initial_accumulator_value(s.initial_accumulator_value)
                                                   .eps(s.eps));
    default: break;  // the algorithms' own: above
  }
  throw Error("unknown optimizer type", false);
}
}  // namespace

BuiltOptimizers build_optimizers(const std::vector<OptimizerSpec>& specs,
                                 const std::vector<std::pair<std::string, at::Tensor>>& parameters) {
  std::vector<std::vector<at::Tensor>> assigned(specs.size());
  BuiltOptimizers out;
  for (const auto& [name, p] : parameters) {
    if (!p.requires_grad()) continue;
    bool taken = false;
    for (size_t i = 0; i < specs.size() && !taken; ++i) {
      for (const auto& pattern : specs[i].params) {
        if (glob_match(pattern, name)) {
          assigned[i].push_back(p);
          taken = true;
          break;
        }
      }
    }
    if (!taken) out.unassigned.push_back(name);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    if (assigned[i].empty()) {
      std::string globs;
      for (const auto& g : specs[i].params) globs += (globs.empty() ? "" : ", ") + g;
      throw Error("optimizers[" + std::to_string(i) + "]: its params [" + globs +
                      "] match no trainable parameter that an earlier optimizer has not taken",
                  true);
    }
    std::shared_ptr<torch::optim::Optimizer> optimizer = make_one(specs[i], assigned[i]);
    if (specs[i].fused) optimizer = fuse_optimizer(optimizer);
    out.optimizers.push_back(optimizer);
    out.base_lrs.push_back(specs[i].lr);
  }
  return out;
}

double scheduled_lr(const SchedulerSpec& spec, double base, double step, int64_t total_steps) {
  if (spec.warmup_steps > 0 && step < static_cast<double>(spec.warmup_steps)) {
    return base * (step + 1) / static_cast<double>(spec.warmup_steps);
  }
  const double after = step - static_cast<double>(spec.warmup_steps);
  const int64_t span = std::max<int64_t>(1, spec.total_steps.value_or(total_steps) - spec.warmup_steps);
  const double progress = std::min(1.0, after / static_cast<double>(span));
  switch (spec.type) {
    case SchedulerType::kConstant: return base;
    case SchedulerType::kStep:
      return spec.step_size > 0
                 ? base * std::pow(spec.gamma, std::floor(after / static_cast<double>(spec.step_size)))
                 : base;
    case SchedulerType::kCosine:
      return spec.min_lr + (base - spec.min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
    case SchedulerType::kLinear: return base * (1.0 + (spec.end_factor - 1.0) * progress);
  }
  return base;
}

void set_lr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

std::vector<double> current_lrs(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers) {
  std::vector<double> lrs;
  for (const auto& o : optimizers) lrs.push_back(o->param_groups()[0].options().get_lr());
  return lrs;
}

}  // namespace bagua::train
