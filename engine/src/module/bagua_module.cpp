// BaguaModule: registration, hooks, bucket launching, and with_bagua().
#include <bagua/distributed.h>
#include <bagua/errors.h>

#include "module/autograd_hooks.h"
#include "module/comm_thread.h"

#include <ATen/ATen.h>
#include <torch/serialize.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <unordered_set>
#include <sstream>

namespace bagua {

struct BaguaModule::Internals {
  std::mutex mutex;  // iteration state below, touched from autograd hooks
  std::vector<std::unique_ptr<module::GradAccumulatorHook>> hooks;
  std::unique_ptr<module::CommThread> comm = std::make_unique<module::CommThread>();
  // The parameters whose gradients are hooked (bagua_build_params, fixed at
  // construction), and where each one's registered tensor sits, if any.
  std::vector<std::pair<std::string, at::Tensor>> build_params;
  static constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<std::pair<size_t, size_t>> slot_of_param;  // (bucket, index) or (kNone, kNone)
  size_t next_launch = 0;    // buckets launched so far this iteration
  bool in_backward = false;  // a backward pass has touched our parameters
  bool fresh = false;        // readiness was reset by pre_forward and no backward has used it yet
  bool sync = true;          // false: backward passes accumulate gradients locally (set_gradient_sync)
  bool idle = false;         // a world of one whose algorithm has nothing to do alone (idle_when_alone)
  std::unordered_set<const c10::TensorImpl*> hooked;  // build_params, by tensor
  std::vector<at::Tensor> cleared;  // parameters whose gradient zero_grad() set to none
  std::function<void(const TraceEvent&)> trace;
  std::atomic<int64_t> sequence{0};
  // Bucket autotune (see WithBaguaOptions::autotune_buckets).
  struct Autotune {
    bool running = false;
    std::vector<int64_t> sizes;    // bucket sizes to try, in order
    std::vector<int64_t> buckets;  // how many buckets each made
    std::vector<std::vector<double>> seconds;  // timed steps, per size
    size_t current = 0;
    int steps_begun = 0;  // under the current size
    std::optional<std::chrono::steady_clock::time_point> last_start;
    std::optional<AutotuneResult> result;
  } autotune;
};

namespace {

// How many buckets make_buckets would make of these tensors at `cap`
// bytes per bucket (unflattened: nothing is allocated).
int64_t count_buckets(const std::vector<std::shared_ptr<Bucket>>& buckets, int64_t cap) {
  std::vector<BaguaTensor> tensors;
  for (const auto& b : buckets) tensors.insert(tensors.end(), b->tensors().begin(), b->tensors().end());
  BucketOptions options;
  options.bucket_bytes = cap;
  options.flatten = false;
  return static_cast<int64_t>(make_buckets(tensors, options).size());
}

}  // namespace

// What the algorithm sees of the module.
class BaguaModule::Context : public AlgorithmContext {
 public:
  explicit Context(BaguaModule& module) : m_(module) {}
  std::vector<std::pair<std::string, at::Tensor>> build_params() const override {
    return m_.internals_->build_params;
  }
  const std::vector<OptimizerPtr>& optimizers() const override { return m_.optimizers_; }
  const std::vector<std::shared_ptr<Bucket>>& buckets() const override { return m_.buckets_; }
  void mark_ready(size_t bucket, size_t index) override {
    std::lock_guard<std::mutex> lock(m_.internals_->mutex);
    m_.mark_ready_locked(bucket, index);
  }
  void submit(std::function<void()> job) override { m_.internals_->comm->submit(std::move(job)); }
  void wait_for_buckets() override { m_.wait_for_buckets(); }
  int64_t step_counter() const override { return m_.step_counter_; }
  const ProcessGroupPtr& process_group() const override { return m_.group_; }
  int64_t bucket_bytes() const override { return m_.options_.bucket_bytes; }
  bool do_flatten() const override { return m_.options_.do_flatten; }
  bool may_skip_steps() const override { return m_.options_.may_skip_steps; }

 private:
  BaguaModule& m_;
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

namespace {

// One line per tensor: "param fc1.weight Float[64, 49]".
std::vector<std::string> model_layout(const std::vector<std::pair<std::string, at::Tensor>>& parameters,
                                      const std::vector<std::pair<std::string, at::Tensor>>& buffers) {
  std::vector<std::string> out;
  auto add = [&](const char* kind, const std::vector<std::pair<std::string, at::Tensor>>& named) {
    for (const auto& [name, t] : named) {
      std::ostringstream line;
      line << kind << " " << name << " ";
      if (t.defined()) line << t.scalar_type() << t.sizes();
      else line << "undefined";
      out.push_back(line.str());
    }
  };
  add("parameter", parameters);
  add("buffer", buffers);
  return out;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// Every rank must wrap the same model: rank 0's layout (names, dtypes,
// shapes) is compared on every rank, and every rank throws, naming the
// ranks that differ and, on those, the first difference. (The broadcast of
// rank 0's weights would otherwise fail on sizes alone, or, for models of
// one size, silently copy weights into the wrong tensors.)
void check_same_model_on_every_rank(const std::vector<std::pair<std::string, at::Tensor>>& parameters,
                                    const std::vector<std::pair<std::string, at::Tensor>>& buffers,
                                    const ProcessGroupPtr& group) {
  if (group->size() == 1) return;
  const std::vector<std::string> mine = model_layout(parameters, buffers);
  std::string root = group->rank() == 0 ? joined(mine) : std::string();
  broadcast_object(root, 0, group);
  const bool differs = root != joined(mine);
  // Which ranks differ: one slot per rank, summed. On the parameters'
  // device, which is the group's (an NCCL group takes CUDA tensors only).
  const at::Device device = parameters.empty() ? at::Device(at::kCPU) : parameters.front().second.device();
  at::Tensor flags = at::zeros({group->size()}, at::TensorOptions().dtype(at::kInt).device(device));
  if (differs) flags[group->rank()].fill_(1);
  allreduce(flags, ReduceOp::SUM, group);
  flags = flags.cpu();
  std::vector<int> ranks;
  for (int r = 0; r < group->size(); ++r)
    if (flags[r].item<int>() != 0) ranks.push_back(r);
  if (ranks.empty()) return;
  std::string listed;
  for (int r : ranks) listed += (listed.empty() ? "" : ", ") + std::to_string(r);
  std::string message = "with_bagua: the ranks wrap different models: rank" + std::string(ranks.size() > 1 ? "s " : " ") +
                        listed + " differ" + (ranks.size() > 1 ? "" : "s") +
                        " from rank 0 in parameter or buffer names, dtypes or shapes (every rank must build "
                        "the same model)";
  if (differs) {
    std::vector<std::string> theirs;
    std::istringstream in(root);
    for (std::string line; std::getline(in, line);) theirs.push_back(line);
    size_t i = 0;
    while (i < mine.size() && i < theirs.size() && mine[i] == theirs[i]) ++i;
    message += "; first difference: rank 0 has " + (i < theirs.size() ? "'" + theirs[i] + "'" : std::string("no more")) +
               ", this rank (" + std::to_string(group->rank()) + ") has " +
               (i < mine.size() ? "'" + mine[i] + "'" : std::string("no more")) + " (" +
               std::to_string(theirs.size()) + " tensors on rank 0, " + std::to_string(mine.size()) + " here)";
  }
  throw InvalidArgument(message);
}

}  // namespace

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
  internals_->build_params = bagua_build_params();
  for (const auto& [name, p] : internals_->build_params) internals_->hooked.insert(p.unsafeGetTensorImpl());
  step_counter_ = options_.step_counter;
  check_same_model_on_every_rank(parameters_, buffers_, group_);
  broadcast_initial_state();
  context_ = std::make_unique<Context>(*this);
  impl_ = algorithm_->reify(group_);
  init_algorithm();
  if (options_.autotune_buckets) {
    if (impl_->keeps_bucket_state()) {
      throw InvalidArgument("with_bagua: bucket autotune rebuilds the buckets during the first steps, but this "
                            "algorithm keeps state per bucket across steps; give a fixed bucket_bytes");
    }
    if (options_.autotune_steps_per_size < 2) {
      throw InvalidArgument("with_bagua: autotune_steps_per_size must be at least 2 (the first step at each size "
                            "is not timed), found " + std::to_string(options_.autotune_steps_per_size));
    }
    // The sizes to try: the one given, then the whole model in one bucket
    // and a half, quarter, eighth and sixteenth of it; a size that makes as
    // many buckets as one before it is left out.
    int64_t total = 0;
    for (const auto& b : buckets_) total += b->numel() * static_cast<int64_t>(c10::elementSize(b->dtype()));
    auto& a = internals_->autotune;
    std::vector<int64_t> counts_seen;
    for (int64_t size : {options_.bucket_bytes, total, total / 2, total / 4, total / 8, total / 16}) {
      size = std::max<int64_t>(size, 1);
      const int64_t count = count_buckets(buckets_, size);
      if (std::find(counts_seen.begin(), counts_seen.end(), count) != counts_seen.end()) continue;
      counts_seen.push_back(count);
      a.sizes.push_back(size);
    }
    a.buckets.assign(a.sizes.size(), 0);
    a.buckets[0] = static_cast<int64_t>(buckets_.size());
    a.seconds.resize(a.sizes.size());
    a.running = !buckets_.empty();
  }
  install_hooks();
}

const std::optional<AutotuneResult>& BaguaModule::autotune_result() const { return internals_->autotune.result; }

void BaguaModule::rebucket(int64_t bucket_bytes) {
  wait_for_buckets();
  options_.bucket_bytes = bucket_bytes;
  init_algorithm();
}

// At the start of each step while tuning: the step that just ended is timed
// (unless it was the first at its size); after autotune_steps_per_size steps
// the next size is tried; after the last, every rank agrees on the size
// whose slowest rank's median step was shortest. Collective then.
void BaguaModule::autotune_at_step_start() {
  auto& a = internals_->autotune;
  if (!a.running) return;
  const auto now = std::chrono::steady_clock::now();
  if (a.last_start && a.steps_begun >= 2) {
    a.seconds[a.current].push_back(std::chrono::duration<double>(now - *a.last_start).count());
  }
  a.last_start = now;
  if (a.steps_begun == options_.autotune_steps_per_size) {
    if (a.current + 1 < a.sizes.size()) {
      ++a.current;
      rebucket(a.sizes[a.current]);
      a.buckets[a.current] = static_cast<int64_t>(buckets_.size());
      a.steps_begun = 0;
    } else {
      std::vector<double> medians;
      for (auto& s : a.seconds) {
        std::sort(s.begin(), s.end());
        medians.push_back(s.empty() ? 0.0 : s[s.size() / 2]);
      }
      at::Tensor slowest = at::tensor(medians, at::kDouble);
      allreduce(slowest, ReduceOp::MAX, group_);
      AutotuneResult r;
      size_t best = 0;
      for (size_t i = 0; i < a.sizes.size(); ++i) {
        const double t = slowest[static_cast<int64_t>(i)].item<double>();
        r.trials.push_back({a.sizes[i], a.buckets[i], t});
        if (t < r.trials[best].step_seconds) best = i;
      }
      r.chosen_bucket_bytes = a.sizes[best];
      r.at_step = step_counter_;
      if (best != a.current) rebucket(a.sizes[best]);
      a.result = r;
      a.running = false;
      return;
    }
  }
  ++a.steps_begun;
}

BaguaModule::~BaguaModule() {
  remove_hooks();
  shutdown_algorithm();
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

// (Re)builds the tensors, buckets and per-bucket state of the current
// algorithm, and maps each hooked parameter to its registered tensor.
void BaguaModule::init_algorithm() {
  // Alone, an algorithm that would leave the tensors as they are gets no
  // buckets: nothing is copied, launched or awaited.
  const bool idle = group_->size() == 1 && impl_->idle_when_alone();
  std::vector<BaguaTensor> tensors = idle ? std::vector<BaguaTensor>{} : impl_->init_tensors(*context_);
  buckets_ = tensors.empty() ? std::vector<std::shared_ptr<Bucket>>{}
                             : make_buckets(tensors, impl_->bucket_options(*context_));
  for (auto& bucket : buckets_) {
    bucket->attach();
    impl_->init_operations(*context_, *bucket);
  }
  std::map<std::string, size_t> param_index;
  for (size_t p = 0; p < internals_->build_params.size(); ++p) param_index[internals_->build_params[p].first] = p;
  std::lock_guard<std::mutex> lock(internals_->mutex);
  internals_->slot_of_param.assign(internals_->build_params.size(), {Internals::kNone, Internals::kNone});
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const auto& tensors_of = buckets_[b]->tensors();
    for (size_t i = 0; i < tensors_of.size(); ++i) {
      auto it = param_index.find(tensors_of[i].name);
      if (it != param_index.end()) internals_->slot_of_param[it->second] = {b, i};
    }
  }
  internals_->in_backward = false;
  internals_->fresh = false;
  internals_->idle = idle;
  reset_iteration_locked();
}

// Every hooked parameter's gradient accumulator reports to
// on_gradient_ready(), whatever the algorithm registers.
void BaguaModule::install_hooks() {
  for (size_t p = 0; p < internals_->build_params.size(); ++p) {
    internals_->hooks.push_back(std::make_unique<module::GradAccumulatorHook>(
        internals_->build_params[p].second, [this, p] { on_gradient_ready(p); }));
  }
}

void BaguaModule::remove_hooks() { internals_->hooks.clear(); }

// Lets the algorithm stop its background work, then drains the
// communication thread. Errors are dropped: this runs on teardown paths.
void BaguaModule::shutdown_algorithm() {
  if (!impl_) return;
  try {
    impl_->on_shutdown(*context_);
  } catch (const std::exception&) {
  }
  try {
    internals_->comm->wait_all();
  } catch (const std::exception&) {
    // The error was reported where it happened; nothing is left to do here.
  }
}

void BaguaModule::switch_algorithm(AlgorithmPtr algorithm) {
  if (!algorithm) throw InvalidArgument("switch_algorithm: the algorithm is null");
  wait_for_buckets();
  shutdown_algorithm();
  // Gradients stay where they are; they stop being views into old buckets
  // once the new buckets attach (attach copies their current values).
  algorithm_ = std::move(algorithm);
  impl_ = algorithm_->reify(group_);
  init_algorithm();
}

void BaguaModule::reset_iteration_locked() {
  internals_->next_launch = 0;
  for (auto& bucket : buckets_) bucket->reset_ready();
}

void BaguaModule::pre_forward() {
  {
    // A backward pass that failed inside autograd never ran its end-of-
    // backward callback; start the next iteration clean.
    std::lock_guard<std::mutex> lock(internals_->mutex);
    internals_->in_backward = false;
  }
  if (impl_->need_reset(*context_)) {
    // As Bagua's re-initialisation: every rank starts the new phase from
    // rank 0's parameters and optimizer state.
    wait_for_buckets();
    broadcast_initial_state();
    init_algorithm();
  }
  autotune_at_step_start();
  {
    std::lock_guard<std::mutex> lock(internals_->mutex);
    reset_iteration_locked();
    internals_->fresh = true;
  }
  ++step_counter_;
  impl_->on_forward_pre(*context_);
}

c10::IValue BaguaModule::forward(torch::jit::Module& module, std::vector<c10::IValue> inputs) {
  pre_forward();
  return module.forward(std::move(inputs));
}

void BaguaModule::step() {
  {
    // A parameter whose gradient zero_grad() set to none and backward did
    // not fill steps as if it had been zeroed (momentum and weight decay
    // still move it), not skipped.
    at::NoGradGuard no_grad;
    for (auto& p : internals_->cleared) {
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
    }
    internals_->cleared.clear();
  }
  for (auto& opt : optimizers_) opt->step();
  impl_->on_post_step(*context_);
}

void BaguaModule::skip_step() {
  internals_->cleared.clear();
  impl_->on_step_skipped(*context_);
}

void BaguaModule::set_gradient_sync(bool sync) {
  std::lock_guard<std::mutex> lock(internals_->mutex);
  internals_->sync = sync;
}

void BaguaModule::zero_grad() {
  at::NoGradGuard no_grad;
  internals_->cleared.clear();
  for (auto& opt : optimizers_) {
    // A fused optimizer zeroes each gradient buffer in one kernel, and keeps
    // the gradients in their buffers.
    if (auto* in_place = dynamic_cast<ZeroesGradientsInPlace*>(opt.get())) {
      in_place->zero_grad_in_place();
      continue;
    }
    for (auto& group : opt->param_groups()) {
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        if (internals_->hooked.count(p.unsafeGetTensorImpl())) {
          // Set to none: backward writes the gradient afresh (no zeroing
          // pass, no read of zeros), and its bucket takes it from there.
          p.mutable_grad() = at::Tensor();
          internals_->cleared.push_back(p);
        } else {
          at::Tensor g = p.grad();  // as LibTorch 1.13's Optimizer::zero_grad
          g.detach_();
          g.zero_();
        }
      }
    }
  }
}

void BaguaModule::set_trace(std::function<void(const TraceEvent&)> trace) {
  std::lock_guard<std::mutex> lock(internals_->mutex);
  internals_->trace = std::move(trace);
}

void BaguaModule::trace(TraceEvent::Kind kind, const std::string& name, int64_t bytes) {
  if (!internals_->trace) return;
  TraceEvent e{kind, name, internals_->sequence++, std::chrono::steady_clock::now(), bytes};
  internals_->trace(e);
}

// From autograd, after hooked parameter p's gradient was accumulated.
void BaguaModule::on_gradient_ready(size_t p) {
  std::lock_guard<std::mutex> lock(internals_->mutex);
  // A micro-batch before the step's last: gradients stay local. Alone with
  // nothing to do: nothing to track either.
  if (!internals_->sync || internals_->idle) return;
  if (!internals_->in_backward) {
    internals_->in_backward = true;
    // Without a pre_forward since the last backward (a module driven by
    // hand), readiness is reset here.
    if (!internals_->fresh) reset_iteration_locked();
    internals_->fresh = false;
    module::at_end_of_backward([this] { on_backward_end(); });
  }
  trace(TraceEvent::kGradientReady, internals_->build_params[p].first);
  auto [b, i] = internals_->slot_of_param[p];
  if (b == Internals::kNone) return;
  // A gradient written afresh (set to none by zero_grad) goes into the
  // bucket's buffer now, while it is still in cache (not at all in a
  // one-tensor bucket, whose buffer it is).
  buckets_[b]->attach(i);
  if (impl_->on_tensor_ready(*context_, *buckets_[b], i)) mark_ready_locked(b, i);
}

// Holds internals_->mutex.
void BaguaModule::mark_ready_locked(size_t b, size_t i) {
  if (b >= buckets_.size()) throw InvalidArgument("mark_ready: no bucket " + std::to_string(b));
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
  bucket->attach();  // tensors replaced since the last step (gradients set to none) go back into the buffer
  trace(TraceEvent::kBucketLaunched, bucket->name());
  internals_->comm->submit([this, bucket] {
    const int64_t sent = internals_->trace ? impl_->bytes_sent() : 0;
    trace(TraceEvent::kBucketCommStart, bucket->name());
    impl_->run_bucket(*context_, *bucket);
    trace(TraceEvent::kBucketCommEnd, bucket->name(), internals_->trace ? impl_->bytes_sent() - sent : 0);
  });
}

// At the end of a backward pass that touched our parameters.
void BaguaModule::on_backward_end() {
  {
    std::lock_guard<std::mutex> lock(internals_->mutex);
    internals_->in_backward = false;
    std::vector<std::string> missing;
    if (impl_->communicates_during_backward()) {
      for (const auto& bucket : buckets_) {
        for (const auto& name : bucket->missing()) missing.push_back(name);
      }
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
  impl_->on_post_backward(*context_);
}

void BaguaModule::wait_for_buckets() {
  trace(TraceEvent::kWaitBegin, "");
  internals_->comm->wait_all();
  trace(TraceEvent::kWaitEnd, "");
}

void BaguaModule::pause_background() { impl_->pause_background(*context_); }
void BaguaModule::resume_background() { impl_->resume_background(*context_); }
void BaguaModule::save_algorithm_state(torch::serialize::OutputArchive& archive) const { impl_->save_state(archive); }
void BaguaModule::load_algorithm_state(torch::serialize::InputArchive& archive) { impl_->load_state(archive); }

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
