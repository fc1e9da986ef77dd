// FusedOptimizer: the wrapped optimizer is kept in its fused form, its
// parameter groups holding one flat tensor per buffer (with the flat
// gradient as its .grad, and a state keyed by it whose tensors are flat),
// while this object's own groups hold the original parameters. save() and
// load() swap the per-parameter form in for the time of the call.
#include <bagua/errors.h>
#include <bagua/fused_optimizer.h>

#include "common/libtorch_compat.h"
#include "common/storage_alias.h"
#include "optim/param_state_fields.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <map>
#include <utility>

namespace bagua {

namespace {

// FuseOptions::max_buffer_bytes' default on the CPU: a buffer that large
// keeps the optimizers' temporaries (Adam's sqrt and quotient are each as
// large as the buffer) in glibc's heap; far larger ones are mmap()ed and
// unmapped at every step, and the page faults on every step cost more than
// the fusion saves (docs/benchmarks.md).
constexpr int64_t kCpuBufferBytes = 256 * 1024;

using torch::optim::OptimizerParamGroup;
using torch::optim::OptimizerParamState;
using StateMap = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;

StateMap::key_type key_of(const at::Tensor& t) {
  return compat::optimizer_state_key<StateMap>(t.unsafeGetTensorImpl());
}

torch::optim::Optimizer& checked(const std::shared_ptr<torch::optim::Optimizer>& optimizer) {
  if (!optimizer) throw InvalidArgument("fuse_optimizer: the optimizer is null");
  if (!optim::is_fusable_type(*optimizer)) {
    throw InvalidArgument("fuse_optimizer: this optimizer type cannot be fused (fusable: SGD, Adam, AdamW, "
                          "RMSprop, Adagrad)");
  }
  return *optimizer;
}

std::vector<OptimizerParamGroup> copy_groups(const std::shared_ptr<torch::optim::Optimizer>& optimizer) {
  checked(optimizer);
  std::vector<OptimizerParamGroup> groups;
  for (const auto& g : optimizer->param_groups()) groups.emplace_back(g.params(), g.options().clone());
  return groups;
}

}  // namespace

struct FusedOptimizer::Impl {
  // The parameters of one dtype and device of one group.
  struct Buffer {
    size_t group = 0;
    std::vector<at::Tensor> params;  // the originals (the caller's tensors)
    std::vector<int64_t> offsets;
    std::vector<std::vector<int64_t>> shapes;  // as fused
    int64_t numel = 0;
    at::Tensor flat;       // the parameters' buffer (undefined: could not be flattened)
    at::Tensor flat_grad;  // the gradients' buffer
    bool fused = false;    // stepped as `flat`; else parameter by parameter
  };

  std::shared_ptr<torch::optim::Optimizer> inner;
  FuseOptions options;
  std::vector<Buffer> buffers;
  std::vector<std::vector<at::Tensor>> loose;  // per group: parameters in no buffer (not dense floating)

  // Places the parameters into buffers (flattening them when asked).
  void flatten_parameters(Buffer& b) {
    at::NoGradGuard no_grad;
    const at::Tensor& first = b.params.front();
    bool back_to_back = true;
    for (size_t i = 0; i < b.params.size() && back_to_back; ++i) {
      const at::Tensor& p = b.params[i];
      back_to_back = p.is_contiguous() && p.storage().is_alias_of(first.storage()) &&
                     p.storage_offset() == first.storage_offset() + b.offsets[i];
    }
    if (back_to_back) {
      b.flat = alias_into(first, 0, {b.numel});
    } else if (options.do_flatten) {
      b.flat = at::empty({b.numel}, first.options());
      for (size_t i = 0; i < b.params.size(); ++i) {
        at::Tensor& p = b.params[i];
        alias_into(b.flat, b.offsets[i], p.sizes()).copy_(p);
        p.set_(b.flat.storage(), b.flat.storage_offset() + b.offsets[i], p.sizes(), c10::contiguous_strides(p.sizes()));
      }
    } else {
      return;
    }
    b.flat_grad = at::zeros({b.numel}, first.options());
    for (size_t i = 0; i < b.params.size(); ++i) rehome_grad(b, i);
    // So LibTorch's step() finds the flat gradient; the flat tensor is no
    // leaf of any graph (it does not require grad).
    b.flat.mutable_grad() = b.flat_grad;
  }

  void rehome_param(Buffer& b, size_t i) {
    at::Tensor& p = b.params[i];
    if (points_into(p, b.flat, b.offsets[i])) return;
    if (p.sizes() != b.shapes[i]) throw InvalidArgument("fused optimizer: a parameter changed its shape");
    alias_into(b.flat, b.offsets[i], p.sizes()).copy_(p);
    p.set_(b.flat.storage(), b.flat.storage_offset() + b.offsets[i], p.sizes(), c10::contiguous_strides(p.sizes()));
  }

  // A gradient that is undefined or lives elsewhere is copied (or zeroed)
  // into its place in the buffer and re-pointed there.
  void rehome_grad(Buffer& b, size_t i) {
    at::Tensor& p = b.params[i];
    const at::Tensor grad = p.grad();
    if (points_into(grad, b.flat_grad, b.offsets[i]) && grad.sizes() == p.sizes()) return;
    at::Tensor alias = alias_into(b.flat_grad, b.offsets[i], p.sizes());
    if (grad.defined()) {
      alias.copy_(grad);
    } else {
      alias.zero_();
    }
    p.mutable_grad() = alias;
  }

  // Moves the per-parameter states of `b`'s parameters out of `per_param`
  // into the wrapped optimizer: one flat state when every parameter has one
  // and they agree on their step counts and fields (or none has one: the
  // optimizer then creates the flat state at its first step); else they stay
  // per parameter and the buffer is stepped unfused.
  void adopt_state(Buffer& b, StateMap& per_param) {
    auto& state = inner->state();
    if (b.flat.defined()) state.erase(key_of(b.flat));
    std::vector<OptimizerParamState*> mine;
    for (const auto& p : b.params) {
      auto it = per_param.find(key_of(p));
      mine.push_back(it == per_param.end() ? nullptr : it->second.get());
    }
    size_t with_state = 0;
    for (auto* s : mine) with_state += s != nullptr;
    b.fused = b.flat.defined() && (with_state == 0 || (with_state == mine.size() && states_agree(b, mine)));
    if (!b.fused || with_state == 0) {
      for (const auto& p : b.params) {
        auto it = per_param.find(key_of(p));
        if (it != per_param.end()) state[it->first] = std::move(it->second);
      }
      return;
    }
    at::NoGradGuard no_grad;
    std::unique_ptr<OptimizerParamState> flat_state = mine.front()->clone();
    auto flat_fields = optim::fields_of(*flat_state);
    for (size_t f = 0; f < flat_fields.tensors.size(); ++f) {
      at::Tensor& field = *flat_fields.tensors[f];
      if (!field.defined()) continue;
      at::Tensor buffer = at::empty({b.numel}, field.options());
      for (size_t i = 0; i < mine.size(); ++i) {
        alias_into(buffer, b.offsets[i], b.params[i].sizes()).copy_(*optim::fields_of(*mine[i]).tensors[f]);
      }
      field = buffer;
    }
    state[key_of(b.flat)] = std::move(flat_state);
    for (const auto& p : b.params) per_param.erase(key_of(p));
  }

  static bool states_agree(const Buffer& b, const std::vector<OptimizerParamState*>& states) {
    auto first = optim::fields_of(*states.front());
    for (size_t i = 0; i < states.size(); ++i) {
      auto fields = optim::fields_of(*states[i]);
      if (fields.counters != first.counters) return false;
      for (size_t f = 0; f < fields.tensors.size(); ++f) {
        const at::Tensor& t = *fields.tensors[f];
        if (t.defined() != first.tensors[f]->defined()) return false;
        if (t.defined() && (t.numel() != b.params[i].numel() || t.is_sparse() ||
                            t.scalar_type() != first.tensors[f]->scalar_type() ||
                            t.device() != first.tensors[f]->device())) {
          return false;
        }
      }
    }
    return true;
  }

  // The wrapped optimizer's groups in fused form.
  void set_fused_groups() {
    auto& groups = inner->param_groups();
    for (auto& g : groups) g.params().clear();
    for (const auto& b : buffers) {
      auto& params = groups[b.group].params();
      if (b.fused) {
        params.push_back(b.flat);
      } else {
        params.insert(params.end(), b.params.begin(), b.params.end());
      }
    }
    for (size_t g = 0; g < loose.size(); ++g) {
      groups[g].params().insert(groups[g].params().end(), loose[g].begin(), loose[g].end());
    }
  }

  // The per-parameter states of every parameter (clones: slices of the flat
  // states are copied out).
  StateMap per_parameter_state() const {
    StateMap out;
    const auto& state = inner->state();
    for (const auto& b : buffers) {
      if (!b.fused) {
        for (const auto& p : b.params) {
          auto it = state.find(key_of(p));
          if (it != state.end()) out[it->first] = it->second->clone();
        }
        continue;
      }
      auto it = state.find(key_of(b.flat));
      if (it == state.end()) continue;
      for (size_t i = 0; i < b.params.size(); ++i) {
        std::unique_ptr<OptimizerParamState> s = it->second->clone();
        for (at::Tensor* field : optim::fields_of(*s).tensors) {
          if (field->defined()) {
            *field = field->narrow(0, b.offsets[i], b.params[i].numel()).view(b.params[i].sizes()).clone();
          }
        }
        out[key_of(b.params[i])] = std::move(s);
      }
    }
    for (const auto& params : loose) {
      for (const auto& p : params) {
        auto it = state.find(key_of(p));
        if (it != state.end()) out[it->first] = it->second->clone();
      }
    }
    return out;
  }
};

namespace {
// For the time of a save() or load(): the wrapped optimizer holds the
// original parameters (with `options` of the caller's groups) and the
// per-parameter `state`; the fused groups and state come back however the
// call ends.
class PerParameterForm {
 public:
  PerParameterForm(torch::optim::Optimizer& inner, const std::vector<OptimizerParamGroup>& outer, StateMap state)
      : inner_(inner), state_(std::move(state)) {
    for (const auto& g : outer) groups_.emplace_back(g.params(), g.options().clone());
    std::swap(inner_.param_groups(), groups_);
    std::swap(inner_.state(), state_);
  }
  ~PerParameterForm() {
    std::swap(inner_.param_groups(), groups_);
    std::swap(inner_.state(), state_);
  }
  // What the wrapped optimizer holds now (after a load: what it read).
  std::vector<OptimizerParamGroup>& groups() { return inner_.param_groups(); }
  StateMap& state() { return inner_.state(); }

 private:
  torch::optim::Optimizer& inner_;
  std::vector<OptimizerParamGroup> groups_;
  StateMap state_;
};
}  // namespace

FusedOptimizer::FusedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, FuseOptions options)
    : torch::optim::Optimizer(copy_groups(optimizer), checked(optimizer).defaults().clone()),
      impl_(std::make_unique<Impl>()) {
  impl_->inner = std::move(optimizer);
  impl_->options = options;
  auto& groups = impl_->inner->param_groups();
  impl_->loose.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    std::map<std::pair<int, std::string>, size_t> buffer_of;  // (dtype, device) -> index in buffers
    for (const auto& p : groups[g].params()) {
      if (!p.defined() || p.layout() != at::kStrided || !at::isFloatingType(p.scalar_type())) {
        impl_->loose[g].push_back(p);
        continue;
      }
      auto key = std::make_pair(static_cast<int>(p.scalar_type()), p.device().str());
      auto [it, added] = buffer_of.emplace(key, impl_->buffers.size());
      const int64_t item = static_cast<int64_t>(p.element_size());
      const int64_t cap = impl_->options.max_buffer_bytes > 0 ? impl_->options.max_buffer_bytes
                          : p.is_cpu()                        ? kCpuBufferBytes
                                                              : 0;
      if (!added && cap > 0 && (impl_->buffers[it->second].numel + p.numel()) * item > cap) {
        it->second = impl_->buffers.size();  // this one is full: the next of its dtype and device
        added = true;
      }
      if (added) {
        impl_->buffers.emplace_back();
        impl_->buffers.back().group = g;
      }
      Impl::Buffer& b = impl_->buffers[it->second];
      b.params.push_back(p);
      b.offsets.push_back(b.numel);
      b.shapes.push_back(p.sizes().vec());
      b.numel += p.numel();
    }
  }
  StateMap per_param = std::move(impl_->inner->state());
  impl_->inner->state().clear();
  for (auto& b : impl_->buffers) {
    impl_->flatten_parameters(b);
    impl_->adopt_state(b, per_param);
  }
  for (auto& [key, s] : per_param) impl_->inner->state()[key] = std::move(s);  // loose parameters'
  impl_->set_fused_groups();
}

FusedOptimizer::~FusedOptimizer() = default;

at::Tensor FusedOptimizer::step(LossClosure closure) {
  {
    at::NoGradGuard no_grad;
    for (auto& b : impl_->buffers) {
      if (!b.fused || !impl_->options.check_flatten) continue;
      for (size_t i = 0; i < b.params.size(); ++i) {
        impl_->rehome_param(b, i);
        impl_->rehome_grad(b, i);
      }
      if (!points_into(b.flat.grad(), b.flat_grad, 0)) b.flat.mutable_grad() = b.flat_grad;
    }
  }
  // The caller's hyperparameters (a scheduler sets the learning rate here).
  auto& inner_groups = impl_->inner->param_groups();
  if (inner_groups.size() != param_groups_.size()) {
    throw InvalidArgument("fused optimizer: a parameter group was added after fuse_optimizer; add it to the "
                          "optimizer before fusing");
  }
  for (size_t g = 0; g < param_groups_.size(); ++g) inner_groups[g].set_options(param_groups_[g].options().clone());
  return impl_->inner->step(std::move(closure));
}

void FusedOptimizer::zero_grad_fused() {
  at::NoGradGuard no_grad;
  for (auto& b : impl_->buffers) {
    if (!b.flat_grad.defined()) {
      for (auto& p : b.params) {
        if (p.grad().defined()) p.mutable_grad().zero_();
      }
      continue;
    }
    b.flat_grad.zero_();
    for (size_t i = 0; i < b.params.size(); ++i) impl_->rehome_grad(b, i);
  }
  for (auto& params : impl_->loose) {
    for (auto& p : params) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
  }
}

void FusedOptimizer::save(torch::serialize::OutputArchive& archive) const {
  PerParameterForm form(*impl_->inner, param_groups_, impl_->per_parameter_state());
  impl_->inner->save(archive);
}

void FusedOptimizer::load(torch::serialize::InputArchive& archive) {
  StateMap loaded;
  {
    PerParameterForm form(*impl_->inner, param_groups_, StateMap());
    impl_->inner->load(archive);
    for (size_t g = 0; g < param_groups_.size(); ++g) param_groups_[g].set_options(form.groups()[g].options().clone());
    loaded = std::move(form.state());
    form.state().clear();
  }
  impl_->inner->state().clear();
  for (auto& b : impl_->buffers) impl_->adopt_state(b, loaded);
  for (auto& [key, s] : loaded) impl_->inner->state()[key] = std::move(s);
  impl_->set_fused_groups();
}

std::vector<FusedBufferInfo> FusedOptimizer::buffers() const {
  std::vector<FusedBufferInfo> out;
  for (const auto& b : impl_->buffers) {
    const at::Tensor& p = b.params.front();
    out.push_back({b.group, p.scalar_type(), p.device(), b.params.size(), b.numel, b.fused});
  }
  return out;
}

std::shared_ptr<FusedOptimizer> fuse_optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, bool do_flatten,
                                               bool check_flatten) {
  FuseOptions options;
  options.do_flatten = do_flatten;
  options.check_flatten = check_flatten;
  return std::make_shared<FusedOptimizer>(std::move(optimizer), options);
}

}  // namespace bagua
