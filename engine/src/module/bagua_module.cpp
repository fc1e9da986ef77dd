// BaguaModule: registration, hooks, bucket launching, and with_bagua().
#include <bagua/distributed.h>
#include <bagua/errors.h>

#include "module/autograd_hooks.h"
#include "module/comm_thread.h"

#include <ATen/ATen.h>
#include <torch/serialize.h>

#include <atomic>
#include <map>
#include <sstream>

namespace bagua {

struct BaguaModule::Internals {
  std::mutex mutex;  // iteration state below, touched from autograd hooks
  std::vector<std::unique_ptr<module::GradAccumulatorHook>> hooks;
  std::unique_ptr<module::CommThread> comm = std::make_unique<module::CommThread>();
  size_t next_launch = 0;      // buckets launched so far this iteration
  bool in_backward = false;    // a backward pass has touched our parameters
  std::function<void(const TraceEvent&)> trace;
  std::atomic<int64_t> sequence{0};
};

bool glob_match(const std::string& pattern, const std::string& name) {
  // Iterative wildcard matching with backtracking to the last '*'.
  size_t p = 0, n = 0, star = std::string::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

BaguaModule::BaguaModule(std::vector<std::pair<std::string, at::Tensor>> parameters,
                         std::vector<std::pair<std::string, at::Tensor>> buffers,
                         std::vector<OptimizerPtr> optimizers, AlgorithmPtr algorithm,
                         WithBaguaOptions options)
    : parameters_(std::move(parameters)),
      buffers_(std::move(buffers)),
      optimizers_(std::move(optimizers)),
      algorithm_(std::move(algorithm)),
      options_(std::move(options)),
      internals_(std::make_unique<Internals>()) {
  if (!algorithm_) throw InvalidArgument("with_bagua: the algorithm is null");
  if (options_.bucket_bytes <= 0) throw InvalidArgument("with_bagua: bucket_bytes must be positive");
  for (const auto& opt : optimizers_) {
    if (!opt) throw InvalidArgument("with_bagua: an optimizer is null");
  }
  for (const auto& pattern : options_.parameters_to_ignore) {
    bool any = false;
    for (const auto& [name, p] : parameters_) any = any || glob_match(pattern, name);
    if (!any) {
      std::string names;
      for (size_t i = 0; i < parameters_.size() && i < 12; ++i) names += (i ? ", " : "") + parameters_[i].first;
      throw InvalidArgument("with_bagua: parameters_to_ignore entry '" + pattern +
                            "' matches no parameter (the parameters are: " + names +
                            (parameters_.size() > 12 ? ", ..." : "") + ")");
    }
  }
  group_ = options_.process_group ? options_.process_group : default_group();
  if (!group_->is_member()) {
    throw InvalidArgument("with_bagua: this process is not a member of the given process group");
  }
  broadcast_initial_state();
  init_algorithm();
}

BaguaModule::~BaguaModule() {
  remove_hooks();
  try {
    internals_->comm->wait_all();
  } catch (const std::exception&) {
    // The error was reported where it happened; nothing is left to do here.
  }
}

std::vector<std::pair<std::string, at::Tensor>> BaguaModule::bagua_build_params() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, p] : parameters_) {
    if (!p.requires_grad()) continue;
    bool ignored = false;
    for (const auto& pattern : options_.parameters_to_ignore) ignored = ignored || glob_match(pattern, name);
    if (!ignored) out.emplace_back(name, p);
  }
  return out;
}

void BaguaModule::broadcast_initial_state() {
  at::NoGradGuard no_grad;
  // Parameters and buffers, one flat broadcast per dtype.
  auto broadcast_all = [&](const std::vector<std::pair<std::string, at::Tensor>>& named) {
    std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
    for (const auto& [name, t] : named) {
      if (t.defined() && t.numel() > 0) by_dtype[t.scalar_type()].push_back(t);
    }
    // Every rank must agree on which dtypes exist: the verified broadcast of
    // the first flat tensor catches a model that differs across ranks.
    for (auto& [dtype, tensors] : by_dtype) {
      std::vector<at::Tensor> flat_parts;
      for (const auto& t : tensors) flat_parts.push_back(t.detach().reshape({-1}));
      at::Tensor flat = at::cat(flat_parts);
      broadcast(flat, 0, group_);
      int64_t offset = 0;
      for (auto& t : tensors) {
        t.detach().copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
        offset += t.numel();
      }
    }
  };
  broadcast_all(parameters_);
  broadcast_all(buffers_);
  // Optimizer state and hyperparameters: rank 0's, serialized.
  for (auto& opt : optimizers_) {
    std::string bytes;
    if (group_->rank() == 0) {
      std::ostringstream out;
      torch::save(*opt, out);
      bytes = out.str();
    }
    broadcast_object(bytes, 0, group_);
    if (group_->rank() != 0) {
      std::istringstream in(bytes);
      torch::load(*opt, in);
    }
  }
}

void BaguaModule::init_algorithm() {
  impl_ = algorithm_->reify(group_);
  std::vector<BaguaTensor> tensors = impl_->init_tensors(*this);
  buckets_ = tensors.empty() ? std::vector<std::shared_ptr<Bucket>>{}
                             : make_buckets(tensors, impl_->bucket_options(*this));
  for (auto& bucket : buckets_) {
    bucket->attach();
    impl_->init_operations(*this, *bucket);
  }
  internals_->next_launch = 0;
  internals_->in_backward = false;
  if (!impl_->communicates_during_backward()) return;
  // Hook each parameter whose gradient is registered.
  std::map<std::string, at::Tensor> params;
  for (const auto& [name, p] : bagua_build_params()) params[name] = p;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const auto& tensors_of = buckets_[b]->tensors();
    for (size_t i = 0; i < tensors_of.size(); ++i) {
      auto it = params.find(tensors_of[i].name);
      if (it == params.end()) continue;
      internals_->hooks.push_back(std::make_unique<module::GradAccumulatorHook>(
          it->second, [this, b, i] { on_gradient_ready(b, i); }));
    }
  }
}

void BaguaModule::remove_hooks() { internals_->hooks.clear(); }

void BaguaModule::switch_algorithm(AlgorithmPtr algorithm) {
  if (!algorithm) throw InvalidArgument("switch_algorithm: the algorithm is null");
  wait_for_buckets();
  remove_hooks();
  // Gradients stay where they are; they stop being views into old buckets
  // once the new buckets attach (attach copies their current values).
  algorithm_ = std::move(algorithm);
  init_algorithm();
}

void BaguaModule::pre_forward() {
  {
    // A backward pass that failed inside autograd never ran its end-of-
    // backward callback; start the next iteration clean.
    std::lock_guard<std::mutex> lock(internals_->mutex);
    internals_->in_backward = false;
  }
  if (impl_->need_reset(*this)) {
    wait_for_buckets();
    remove_hooks();
    init_algorithm();
  }
  impl_->on_forward_pre(*this);
}

c10::IValue BaguaModule::forward(torch::jit::Module& module, std::vector<c10::IValue> inputs) {
  pre_forward();
  return module.forward(std::move(inputs));
}

void BaguaModule::step() {
  for (auto& opt : optimizers_) opt->step();
  impl_->on_post_step(*this);
}

void BaguaModule::zero_grad() {
  for (auto& opt : optimizers_) opt->zero_grad();
}

void BaguaModule::set_trace(std::function<void(const TraceEvent&)> trace) {
  std::lock_guard<std::mutex> lock(internals_->mutex);
  internals_->trace = std::move(trace);
}

void BaguaModule::trace(TraceEvent::Kind kind, const std::string& name) {
  if (!internals_->trace) return;
  TraceEvent e{kind, name, internals_->sequence++, std::chrono::steady_clock::now()};
  internals_->trace(e);
}

// From autograd, after bucket b's tensor i was accumulated.
void BaguaModule::on_gradient_ready(size_t b, size_t i) {
  std::lock_guard<std::mutex> lock(internals_->mutex);
  if (!internals_->in_backward) {
    internals_->in_backward = true;
    internals_->next_launch = 0;
    for (auto& bucket : buckets_) bucket->reset_ready();
    module::at_end_of_backward([this] { on_backward_end(); });
  }
  trace(TraceEvent::kGradientReady, buckets_[b]->tensors()[i].name);
  if (buckets_[b]->mark_ready(i) && options_.overlap) launch_ready_buckets();
}

// Launches, in bucket order, every bucket that is complete and whose
// predecessors are launched. Holds internals_->mutex.
void BaguaModule::launch_ready_buckets() {
  while (internals_->next_launch < buckets_.size() && buckets_[internals_->next_launch]->ready()) {
    launch(internals_->next_launch++);
  }
}

void BaguaModule::launch(size_t b) {
  auto bucket = buckets_[b];
  bucket->attach();  // gradients replaced since the last step (set to none) go back into the buffer
  trace(TraceEvent::kBucketLaunched, bucket->name());
  internals_->comm->submit([this, bucket] {
    trace(TraceEvent::kBucketCommStart, bucket->name());
    impl_->run_bucket(*this, *bucket);
    trace(TraceEvent::kBucketCommEnd, bucket->name());
  });
}

// At the end of a backward pass that touched our parameters.
void BaguaModule::on_backward_end() {
  {
    std::lock_guard<std::mutex> lock(internals_->mutex);
    internals_->in_backward = false;
    std::vector<std::string> missing;
    for (const auto& bucket : buckets_) {
      for (const auto& name : bucket->missing()) missing.push_back(name);
    }
    if (!missing.empty()) {
      std::string names;
      for (size_t k = 0; k < missing.size() && k < 10; ++k) names += (k ? ", " : "") + missing[k];
      if (missing.size() > 10) names += ", ... (" + std::to_string(missing.size()) + " in all)";
      throw Error(
          "rank " + std::to_string(get_rank()) + ": these parameters got no gradient in this backward "
          "pass, so their buckets cannot be communicated: " + names +
          ". Either make every parameter take part in the loss, or keep the unused ones out of "
          "communication with parameters_to_ignore (the recipe's model.ignore_params), or set "
          "requires_grad=false on them.",
          true);
    }
    launch_ready_buckets();  // with overlap off, everything launches here
  }
  trace(TraceEvent::kPostBackward, "");
  impl_->on_post_backward(*this);
  ++step_counter_;
}

void BaguaModule::wait_for_buckets() { internals_->comm->wait_all(); }

// ---------------------------------------------------------------- with_bagua

std::shared_ptr<BaguaModule> with_bagua(torch::nn::Module& module, std::vector<OptimizerPtr> optimizers,
                                        AlgorithmPtr algorithm, WithBaguaOptions options) {
  std::vector<std::pair<std::string, at::Tensor>> params, buffers;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) params.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers(/*recurse=*/true)) buffers.emplace_back(item.key(), item.value());
  return std::make_shared<BaguaModule>(std::move(params), std::move(buffers), std::move(optimizers),
                                       std::move(algorithm), std::move(options));
}

std::shared_ptr<BaguaModule> with_bagua(torch::jit::Module& module, std::vector<OptimizerPtr> optimizers,
                                        AlgorithmPtr algorithm, WithBaguaOptions options) {
  std::vector<std::pair<std::string, at::Tensor>> params, buffers;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) params.emplace_back(item.name, item.value);
  for (const auto& item : module.named_buffers(/*recurse=*/true)) buffers.emplace_back(item.name, item.value);
  return std::make_shared<BaguaModule>(std::move(params), std::move(buffers), std::move(optimizers),
                                       std::move(algorithm), std::move(options));
}

}  // namespace bagua
