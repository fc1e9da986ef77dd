#include "train/evaluation.h"

#include <bagua/errors.h>

#include "common/libtorch_compat.h"
#include "train/components.h"

#include <torch/torch.h>
#include <ATen/autocast_mode.h>

#include <cmath>

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

namespace {

// train.precision bf16 or fp16: autocast on this thread while it lives (as
// torch.autocast: matrix products and convolutions in the low precision,
// the ops that need it kept in float32), on the device the model is on.
class Autocast {
 public:
  Autocast(Precision precision, const at::Device& device) : on_(precision != Precision::kFp32), type_(device.type()) {
    if (!on_) return;
    before_ = compat::autocast_enabled(type_);
    compat::set_autocast(type_, true, precision == Precision::kFp16 ? at::kHalf : at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~Autocast() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    compat::set_autocast(type_, before_, at::kFloat);
  }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool on_;
  c10::DeviceType type_;
  bool before_ = false;
};

// The model's output for the loss: float32 (a bf16 or fp16 forward's
// logits are scored in float32, as autocast does for its losses).
at::Tensor for_loss(const at::Tensor& out) {
  const auto type = out.scalar_type();
  return type == at::kBFloat16 || type == at::kHalf ? out.to(at::kFloat) : out;
}

}  // namespace

at::Tensor training_loss(const Recipe& recipe, torch::jit::Module& module, BaguaModule* through, const Batch& batch) {
  at::Tensor out;
  {
    Autocast autocast(recipe.train.precision, batch.input.device());
    if (recipe.model.loss == Loss::kModel) return for_loss(forward_output(module, through, {batch.input, batch.target}));
    out = forward_output(module, through, {batch.input});
  }
  return compute_loss(recipe.model.loss, for_loss(out), batch.target);
}

Batch slice_batch(const Batch& batch, int64_t from, int64_t size) {
  Batch part;
  part.input = batch.input.narrow(0, from, size);
  if (batch.target.defined()) part.target = batch.target.narrow(0, from, size);
  // The padding of a padded batch is counted once, with its first part.
  part.padding = from == 0 ? batch.padding : 0;
  return part;
}

double clip_gradients(const std::vector<std::pair<std::string, at::Tensor>>& params, std::optional<double> max_norm) {
  std::vector<at::Tensor> grads;
  for (const auto& [name, p] : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  // As PyTorch: the norm of the per-tensor norms (one host sync).
  const double norm = at::stack(at::_foreach_norm(grads, 2)).norm().item<double>();
  // torch.nn.utils.clip_grad_norm_: the factor max / (norm + 1e-6), when below 1.
  if (max_norm && std::isfinite(norm)) {
    const double factor = *max_norm / (norm + 1e-6);
    if (factor < 1.0)
      for (auto& g : grads) g.mul_(factor);
  }
  return norm;
}

EvalResult evaluate(const Recipe& recipe, torch::jit::Module& module, const Dataset& dataset,
                    const ProcessGroupPtr& group, const at::Device& device) {
  torch::NoGradGuard no_grad;
  module.eval();
  const int rank = group->rank(), world = group->size();
  std::vector<int64_t> mine;
  for (int64_t i = rank; i < dataset.size(); i += world) mine.push_back(i);
  double loss_sum = 0, correct = 0, sequences = 0;
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
      sequences += n;
      // Tokens: each sample counts the share of its positions predicted.
      correct += out.argmax(-1).eq(b.target).to(at::kDouble).flatten(1).mean(1).sum().item<double>();
    } else if (classify) {
      correct += out.argmax(1).eq(b.target).sum().item<double>();
    }
  }
  at::Tensor sums = torch::tensor({loss_sum, correct, static_cast<double>(mine.size()), sequences}, torch::kDouble);
  allreduce(sums, ReduceOp::SUM, group);
  module.train();
  EvalResult r;
  r.samples = static_cast<int64_t>(sums[2].item<double>());
  if (r.samples > 0) {
    r.loss = sums[0].item<double>() / r.samples;
    if (classify) r.accuracy = sums[1].item<double>() / r.samples;
    if (recipe.model.loss == Loss::kCrossEntropy && sums[3].item<double>() > 0) r.perplexity = std::exp(r.loss);
  }
  return r;
}

}  // namespace bagua::train
