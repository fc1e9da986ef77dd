// The pieces a training run is built from, each made from its part of the
// Recipe: the loss, the optimizers (parameters assigned by globs), and the
// learning-rate schedule.
#pragma once

#include <bagua/recipe.h>

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace bagua::train {

// loss(output, target) for every Loss but kModel (the model computes it).
// A sequence model's output: logits [B, T, V] (any number of leading
// dimensions) against targets [B, T]. cross_entropy and nll then take the
// classes over the last dimension, every position a sample (as nanoGPT
// flattens), rather than over dimension 1.
bool is_sequence_output(const at::Tensor& output, const at::Tensor& target);

at::Tensor compute_loss(Loss loss, const at::Tensor& output, const at::Tensor& target);

struct BuiltOptimizers {
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers;
  std::vector<double> base_lrs;             // one per optimizer
  std::vector<std::string> unassigned;      // parameters no optimizer takes (frozen)
};

// One optimizer per spec; each parameter goes to the first spec whose
// `params` globs match its name. Throws RecipeError-style bagua::Error for a
// spec that matches no parameter.
BuiltOptimizers build_optimizers(const std::vector<OptimizerSpec>& specs,
                                 const std::vector<std::pair<std::string, at::Tensor>>& parameters);

// The learning rate of an optimizer with base lr `base` at `step` (0-based;
// fractional after a resume at another size, where the schedule follows the
// samples seen, in steps of the run's first global batch) of a run of
// `total_steps`: linear warm-up over warmup_steps, then the
// schedule (cosine ends at min_lr, linear at base * end_factor).
double scheduled_lr(const SchedulerSpec& spec, double base, double step, int64_t total_steps);

// Sets every parameter group's lr of `optimizer`.
void set_lr(torch::optim::Optimizer& optimizer, double lr);

// Each optimizer's current lr (its first parameter group's), in order.
std::vector<double> current_lrs(const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers);

}  // namespace bagua::train
