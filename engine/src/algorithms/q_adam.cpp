// QAdamOptimizer and QAdamAlgorithm (bagua/algorithms/q_adam.h).
#include <bagua/algorithms/q_adam.h>
#include <bagua/errors.h>

#include "algorithms/factories.h"

#include "algorithms/low_precision.h"
#include "common/libtorch_compat.h"

#include <ATen/ATen.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace bagua {

// ---------------------------------------------------------------- options and state

QAdamOptions::QAdamOptions(double lr) : lr_(lr) {}

void QAdamOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(warmup_steps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(betas);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
}

void QAdamOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, warmup_steps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(betas_t, betas);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
}

void QAdamParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq);
}

void QAdamParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(at::Tensor, exp_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(at::Tensor, exp_avg_sq);
}

// ---------------------------------------------------------------- optimizer

QAdamOptimizer::QAdamOptimizer(std::vector<at::Tensor> params, QAdamOptions options)
    : QAdamOptimizer(std::vector<torch::optim::OptimizerParamGroup>{torch::optim::OptimizerParamGroup(std::move(params))},
                     options) {}

QAdamOptimizer::QAdamOptimizer(std::vector<torch::optim::OptimizerParamGroup> groups, QAdamOptions options)
    : Optimizer(std::move(groups), std::make_unique<QAdamOptions>(options)) {
  check_options(options);
}

void QAdamOptimizer::check_options(const QAdamOptions& o) const {
  auto [b1, b2] = o.betas();
  std::string bad;
  if (!(o.lr() >= 0)) bad = "lr must be >= 0, got " + std::to_string(o.lr());
  else if (!(o.eps() >= 0)) bad = "eps must be >= 0, got " + std::to_string(o.eps());
  else if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1)) bad = "betas must be in [0, 1)";
  else if (o.weight_decay() < 0) bad = "weight_decay must be >= 0";
  else if (o.warmup_steps() < 1) {
    bad = "warmup_steps must be at least 1 (the second moment is frozen after the warm-up, so it needs one), got " +
          std::to_string(o.warmup_steps());
  }
  if (!bad.empty()) throw InvalidArgument("QAdamOptimizer: " + bad);
}

QAdamParamState& QAdamOptimizer::state_of(const at::Tensor& param) {
  auto key = compat::optimizer_state_key<std::decay_t<decltype(state_)>>(param.unsafeGetTensorImpl());
  auto it = state_.find(key);
  if (it == state_.end()) {
    auto fresh = std::make_unique<QAdamParamState>();
    fresh->exp_avg(at::zeros_like(param, at::MemoryFormat::Preserve));
    fresh->exp_avg_sq(at::zeros_like(param, at::MemoryFormat::Preserve));
    it = state_.emplace(key, std::move(fresh)).first;
  }
  return static_cast<QAdamParamState&>(*it->second);
}

int64_t QAdamOptimizer::step_count() const {
  for (const auto& group : param_groups_) {
    for (const auto& p : group.params()) {
      auto it = state_.find(compat::optimizer_state_key<std::decay_t<decltype(state_)>>(p.unsafeGetTensorImpl()));
      return it == state_.end() ? 0 : static_cast<const QAdamParamState&>(*it->second).step();
    }
  }
  return 0;
}

std::vector<std::pair<at::Tensor, at::Tensor>> QAdamOptimizer::averaged_state() const {
  std::vector<std::pair<at::Tensor, at::Tensor>> state;
  if (step_count() == 0) return state;
  for (const auto& group : param_groups_) {
    for (const auto& p : group.params()) {
      auto it = state_.find(compat::optimizer_state_key<std::decay_t<decltype(state_)>>(p.unsafeGetTensorImpl()));
      if (it != state_.end()) state.emplace_back(p, static_cast<const QAdamParamState&>(*it->second).exp_avg());
    }
  }
  return state;
}

int64_t QAdamOptimizer::warmup_steps() const {
  return static_cast<const QAdamOptions&>(param_groups_.at(0).options()).warmup_steps();
}

double QAdamOptimizer::beta1() const {
  return std::get<0>(static_cast<const QAdamOptions&>(param_groups_.at(0).options()).betas());
}

// The warm-up steps are LibTorch's Adam::step operation for operation (same
// ops, same order), so they are bitwise Adam's.
at::Tensor QAdamOptimizer::step(LossClosure closure) {
  at::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    auto& options = static_cast<QAdamOptions&>(group.options());
    const auto [beta1, beta2] = options.betas();
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      at::Tensor grad = p.grad();
      QAdamParamState& state = state_of(p);
      state.step(state.step() + 1);
      const auto t = static_cast<double>(state.step());
      const double bias_correction1 = 1 - std::pow(beta1, t);
      const double bias_correction2 = 1 - std::pow(beta2, t);
      if (options.weight_decay() != 0) grad = grad.add(p, options.weight_decay());
      if (state.step() < options.warmup_steps()) {
        state.exp_avg().mul_(beta1).add_(grad, 1 - beta1);
        state.exp_avg_sq().mul_(beta2).addcmul_(grad, grad, 1 - beta2);
      }
      // (sqrt(v) / sqrt(bc2)) + eps, as Adam computes it, into a buffer kept
      // across steps: a fresh tensor per step costs page faults on big models.
      at::Tensor& denom = denominators_[p.unsafeGetTensorImpl()];
      if (!denom.defined() || !denom.is_same_size(p) || denom.device() != p.device()) denom = at::empty_like(p);
      if (state.step() < options.warmup_steps()) {
        at::sqrt_out(denom, state.exp_avg_sq());
      } else {
        // The frozen v is protected: max(v, m^2) stands in for it, so an
        // entry whose gradient was (near) zero through the warm-up (a ReLU
        // unit that woke later, an input that was always 0, the 8-bit
        // momentum's rounding) steps by at most about lr, as Adam's steps
        // are bounded, instead of m / eps. v itself stays frozen.
        at::mul_out(denom, state.exp_avg(), state.exp_avg());
        at::maximum_out(denom, denom, state.exp_avg_sq());
        denom.sqrt_();
      }
      denom.div_(std::sqrt(bias_correction2)).add_(options.eps());
      p.addcdiv_(state.exp_avg(), denom, -options.lr() / bias_correction1);
    }
  }
  return loss;
}

void QAdamOptimizer::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<QAdamParamState, QAdamOptions>(archive, *this);
}

void QAdamOptimizer::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<QAdamParamState, QAdamOptions>(archive, *this);
}

// ---------------------------------------------------------------- algorithm

namespace {

class QAdamImpl : public AlgorithmImpl {
 public:
  QAdamImpl(ProcessGroupPtr group, std::shared_ptr<QAdamOptimizer> optimizer, bool hierarchical)
      : AlgorithmImpl(std::move(group)), optimizer_(std::move(optimizer)), hierarchical_(hierarchical) {}

  // Exactly once: at the forward pass after the optimizer's warmup_steps-th
  // step, as Bagua's.
  bool need_reset(AlgorithmContext&) override { return optimizer_->step_count() == optimizer_->warmup_steps(); }

  // Gradients during the warm-up; afterwards each parameter's momentum,
  // named after the parameter.
  std::vector<BaguaTensor> init_tensors(AlgorithmContext& ctx) override {
    momentum_phase_ = optimizer_->step_count() >= optimizer_->warmup_steps();
    if (!momentum_phase_) return AlgorithmImpl::init_tensors(ctx);
    auto params = ctx.build_params();
    std::reverse(params.begin(), params.end());
    params_.clear();
    std::vector<BaguaTensor> tensors;
    for (auto& [name, p] : params) {
      at::Tensor param = p;
      params_[name] = param;
      auto opt = optimizer_;
      BaguaTensor t;
      t.name = name;
      t.get = [opt, param] { return opt->state_of(param).exp_avg(); };
      t.set = [opt, param](const at::Tensor& m) { opt->state_of(param).exp_avg(m); };
      t.dtype = param.scalar_type();
      t.device = param.device();
      t.shape = param.sizes().vec();
      tensors.push_back(std::move(t));
    }
    return tensors;
  }

  BucketOptions bucket_options(AlgorithmContext& ctx) override {
    BucketOptions options = AlgorithmImpl::bucket_options(ctx);
    options.alignment = group_->size();
    return options;
  }

  // The step's momentum update is undone: m as it was before backward
  // (the buckets are done when the step is skipped).
  void on_step_skipped(AlgorithmContext&) override {
    if (!momentum_phase_) return;
    at::NoGradGuard no_grad;
    for (auto& [name, kept] : kept_momentum_) optimizer_->state_of(params_.at(name)).exp_avg().copy_(kept);
  }

  void run_bucket(AlgorithmContext& ctx, Bucket& bucket) override {
    if (!momentum_phase_) {  // warm-up: the exact average of the gradients
      at::Tensor flat = bucket.flat();
      allreduce(flat, ReduceOp::AVG, comm_);
      bucket.write_back(flat);
      return;
    }
    // m = b1 m + (1 - b1) g from this rank's gradient, then m averaged in 8 bits.
    {
      at::NoGradGuard no_grad;
      const double beta1 = optimizer_->beta1();
      for (const auto& t : bucket.tensors()) {
        at::Tensor m = t.get();
        if (ctx.may_skip_steps()) {  // kept to be put back if this step is skipped
          at::Tensor& kept = kept_momentum_[t.name];
          if (!kept.defined() || !kept.is_same_size(m)) kept = at::empty_like(m);
          kept.copy_(m);
        }
        m.mul_(beta1).add_(params_.at(t.name).grad(), 1 - beta1);
      }
    }
    at::Tensor flat = bucket.flat();
    algorithms::centralized_low_precision(flat, comm_, hierarchical_, /*average=*/true,
                                          "qadam, bucket " + bucket.name() + " at step " +
                                              std::to_string(ctx.step_counter()),
                                          &workspaces_[bucket.name()]);
    algorithms::zero_padding(flat, bucket);  // a NaN chunk reaches it too; flat()'s padding must stay zero
    bucket.write_back(flat);
  }

 private:
  std::shared_ptr<QAdamOptimizer> optimizer_;
  bool hierarchical_;
  bool momentum_phase_ = false;
  std::map<std::string, at::Tensor> params_;  // by name, for the momentum phase
  std::map<std::string, algorithms::LowPrecisionWorkspace> workspaces_;  // by bucket; comm thread only
  std::map<std::string, at::Tensor> kept_momentum_;  // by parameter: m before this step (may_skip_steps)
};

}  // namespace

QAdamAlgorithm::QAdamAlgorithm(std::shared_ptr<QAdamOptimizer> optimizer, bool hierarchical)
    : KeywordAlgorithm("qadam", {{"hierarchical", hierarchical}}), optimizer_(std::move(optimizer)) {
  if (!optimizer_) throw InvalidArgument("QAdamAlgorithm: the optimizer is null");
}

std::unique_ptr<AlgorithmImpl> QAdamAlgorithm::reify(ProcessGroupPtr group) const {
  return std::make_unique<QAdamImpl>(std::move(group), optimizer_, kwarg<bool>("hierarchical"));
}

namespace {
AlgorithmPtr make_qadam(const nlohmann::json& kw, const AlgorithmBuildContext& context) {
  std::shared_ptr<QAdamOptimizer> qadam;
  if (context.optimizers.size() == 1) qadam = std::dynamic_pointer_cast<QAdamOptimizer>(context.optimizers[0]);
  if (!qadam) {
    throw InvalidArgument("algorithm qadam drives exactly one optimizer, a QAdamOptimizer (the recipe's "
                          "optimizers: [{type: qadam}]); got " + std::to_string(context.optimizers.size()) +
                          " optimizer(s)" + (context.optimizers.size() == 1 ? " of another type" : ""));
  }
  return std::make_shared<QAdamAlgorithm>(qadam, kw.at("hierarchical").get<bool>());
}

// The recipe's {type: qadam} optimizer.
OptimizerPtr make_qadam_optimizer(std::vector<at::Tensor> params, const OptimizerSpec& s) {
  return std::make_shared<QAdamOptimizer>(std::move(params), QAdamOptions(s.lr)
                                                                 .warmup_steps(s.warmup_steps)
                                                                 .betas({s.betas[0], s.betas[1]})
                                                                 .eps(s.eps)
                                                                 .weight_decay(s.weight_decay));
}
}  // namespace

algorithms::AlgorithmFactory algorithms::qadam_factory() { return {make_qadam, make_qadam_optimizer}; }

}  // namespace bagua
