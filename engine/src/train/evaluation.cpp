#include "train/evaluation.h"

#include <bagua/errors.h>

#include "train/components.h"

#include <torch/torch.h>

namespace bagua::train {

Batch to_device(Batch b, const at::Device& device) {
  if (device.is_cpu()) return b;
  b.input = b.input.to(device, /*non_blocking=*/true);
  if (b.target.defined()) b.target = b.target.to(device, /*non_blocking=*/true);
  return b;
}

at::Tensor forward_output(torch::jit::Module& module, BaguaModule* ddp, std::vector<c10::IValue> inputs) {
  c10::IValue out = ddp ? ddp->forward(module, std::move(inputs)) : module.forward(std::move(inputs));
  if (!out.isTensor()) {
    throw Error("the model's forward must return one tensor (logits, predictions or, with loss: model, the loss); "
                "it returned " + out.tagKind(), true);
  }
  return out.toTensor();
}

at::Tensor training_loss(const Recipe& recipe, torch::jit::Module& module, BaguaModule& ddp, const Batch& batch) {
  if (recipe.model.loss == Loss::kModel) return forward_output(module, &ddp, {batch.input, batch.target});
  return compute_loss(recipe.model.loss, forward_output(module, &ddp, {batch.input}), batch.target);
}

EvalResult evaluate(const Recipe& recipe, torch::jit::Module& module, const Dataset& dataset,
                    const ProcessGroupPtr& group, const at::Device& device) {
  torch::NoGradGuard no_grad;
  module.eval();
  const int rank = group->rank(), world = group->size();
  std::vector<int64_t> mine;
  for (int64_t i = rank; i < dataset.size(); i += world) mine.push_back(i);
  double loss_sum = 0, correct = 0;
  const bool classify = is_classification(recipe.model.loss);
  for (const auto& idx : make_batches(mine, recipe.data.batch_size)) {
    Batch b = to_device(dataset.get_batch(idx), device);
    const double n = static_cast<double>(idx.size());
    if (recipe.model.loss == Loss::kModel) {
      loss_sum += forward_output(module, nullptr, {b.input, b.target}).item<double>() * n;
      continue;
    }
    at::Tensor out = forward_output(module, nullptr, {b.input});
    loss_sum += compute_loss(recipe.model.loss, out, b.target).item<double>() * n;
    if (classify && is_sequence_output(out, b.target)) {
      // Tokens: each sample counts the share of its positions predicted.
      correct += out.argmax(-1).eq(b.target).to(at::kDouble).flatten(1).mean(1).sum().item<double>();
    } else if (classify) {
      correct += out.argmax(1).eq(b.target).sum().item<double>();
    }
  }
  at::Tensor sums = torch::tensor({loss_sum, correct, static_cast<double>(mine.size())}, torch::kDouble);
  allreduce(sums, ReduceOp::SUM, group);
  module.train();
  EvalResult r;
  r.samples = static_cast<int64_t>(sums[2].item<double>());
  if (r.samples > 0) {
    r.loss = sums[0].item<double>() / r.samples;
    if (classify) r.accuracy = sums[1].item<double>() / r.samples;
  }
  return r;
}

}  // namespace bagua::train
