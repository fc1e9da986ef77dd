// Running the model: a batch moved to the training device, the model's
// forward (through BaguaModule when training, so algorithms see it), and an
// evaluation over every rank.
#pragma once

#include <bagua/communication.h>
#include <bagua/data.h>
#include <bagua/distributed.h>
#include <bagua/recipe_spec.h>

#include <ATen/core/Tensor.h>
#include <torch/script.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bagua::train {

// The batch on `device` (host-to-device copies queued on the current
// stream; nothing waits for them here).
Batch to_device(Batch b, const at::Device& device);

// The model's output: one tensor, else a user Error. `ddp` null: the plain
// module (evaluation).
at::Tensor forward_output(torch::jit::Module& module, BaguaModule* ddp, std::vector<c10::IValue> inputs);

// The loss of one training (micro-)batch: the recipe's loss of the output,
// or the model's own (loss: model); under train.precision bf16 the forward
// runs in autocast, the loss in float32. `through`: the forward goes
// through it, so the algorithm's forward-pre hook runs (once per optimizer
// step: the first micro-batch's); null: the plain module.
at::Tensor training_loss(const Recipe& recipe, torch::jit::Module& module, BaguaModule* through, const Batch& batch);

// Samples [from, from + size) of `batch` (views): a micro-batch.
Batch slice_batch(const Batch& batch, int64_t from, int64_t size);

// The global L2 norm of every defined gradient of `params`; with
// `max_norm`, the gradients are then scaled by max_norm / (norm + 1e-6)
// when that is below 1 (torch.nn.utils.clip_grad_norm_). Returns the norm
// before clipping (not finite: nothing is scaled).
double clip_gradients(const std::vector<std::pair<std::string, at::Tensor>>& params, std::optional<double> max_norm);

struct EvalResult {
  double loss = 0;
  std::optional<double> accuracy;  // classification losses only
  std::optional<double> perplexity;  // exp(loss): cross_entropy over token sequences
  int64_t samples = 0;
};

// Every rank evaluates the samples r, r + world, ... (no padding, so no
// sample counts twice), then the sums are reduced over `group`. The module
// is in eval mode meanwhile, in train mode after. Collective.
EvalResult evaluate(const Recipe& recipe, torch::jit::Module& module, const Dataset& dataset,
                    const ProcessGroupPtr& group, const at::Device& device);

}  // namespace bagua::train
