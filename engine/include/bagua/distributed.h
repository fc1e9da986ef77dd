// BaguaModule: a model made data-parallel (Bagua's BaguaModule/with_bagua).
//
//   auto model = torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::ReLU(),
//                                      torch::nn::Linear(16, 2));
//   auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(),
//                                                  torch::optim::SGDOptions(0.01).momentum(0.9));
//   auto ddp = bagua::with_bagua(*model, {sgd}, std::make_shared<bagua::GradientAllReduce>());
//   for (...) {
//     ddp->zero_grad();  // sets the gradients to none (see zero_grad())
//     auto loss = torch::mse_loss(ddp->forward(model, x), y);
//     loss.backward();   // gradients are reduced across ranks when this returns
//     ddp->step();       // the optimizers' step plus the algorithm's post-step work
//   }
//
// with_bagua() checks that every rank wraps the same model (names, dtypes,
// shapes; InvalidArgument on every rank, naming the ranks that differ),
// broadcasts parameters, buffers and optimizer state from group rank 0, so
// every rank starts identical; registers the parameters' gradients
// (minus ignored ones) in buckets; and hooks every parameter's gradient
// accumulator so a bucket is communicated as soon as all its gradients exist,
// while backward continues. Works on a C++ frontend torch::nn::Module and on a
// TorchScript torch::jit::Module alike: both are seen as named parameters and
// buffers ("{module}.{param}" names, as in the state dict).
//
// Call forward()/pre_forward() and step() through the BaguaModule: some
// algorithms communicate there (GradientAllReduce does not need them, but
// calling them keeps code portable across algorithms). The module, the
// optimizers and the model must outlive the BaguaModule; destroying it
// removes its hooks.
#pragma once

#include <bagua/algorithms/algorithm.h>
#include <bagua/bucket.h>
#include <bagua/communication.h>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/script.h>

#include <chrono>
#include <optional>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace bagua {

struct WithBaguaOptions {
  // The group to train over; nullptr = the default group.
  ProcessGroupPtr process_group;
  // Flatten buckets into one buffer each (gradients become views into it).
  bool do_flatten = true;
  // Bytes per bucket (Bagua's default: 10 MiB).
  int64_t bucket_bytes = kDefaultBucketBytes;
  // Parameter names ("{module}.{param}", '*' and '?' globs) kept out of
  // communication: they train on local gradients only.
  std::vector<std::string> parameters_to_ignore;
  // Communicate buckets during backward (true) or only once backward has
  // finished (false: for measuring what overlap gains).
  bool overlap = true;
  // The step counter to start from: a resumed run passes the steps already
  // done, so algorithms that depend on it (a warm-up, every k-th step)
  // start in the right phase.
  int64_t step_counter = 0;
  // Bucket autotune (a recipe's bucket_size: auto): during the first steps
  // the module tries candidate bucket sizes (the whole model in one bucket,
  // a half, a quarter, an eighth and a sixteenth of it, and bucket_bytes),
  // `autotune_steps_per_size` steps each, the first of them not timed;
  // every rank then takes the size whose slowest rank was fastest, and
  // keeps it (autotune_result()). A step is the time from one forward to
  // the next. Results stay those of a fixed bucket size: re-bucketing
  // copies the gradients. Not for algorithms with per-bucket state
  // (low_precision_decentralized, async): with_bagua refuses them.
  bool autotune_buckets = false;
  int autotune_steps_per_size = 3;
  // The caller may call skip_step() instead of step() (a non-finite step
  // skipped): algorithms whose backward changes state (QAdam's momentum)
  // then keep a copy to put back. Costs a copy of that state per step.
  bool may_skip_steps = false;
};

// What bucket autotune tried and chose (same on every rank).
struct AutotuneResult {
  struct Trial {
    int64_t bucket_bytes;
    int64_t buckets;         // how many buckets that size made
    double step_seconds;     // median step time of the slowest rank
  };
  std::vector<Trial> trials;
  int64_t chosen_bucket_bytes = 0;
  int64_t at_step = 0;  // the step counter when the choice was made
};

// What the module reports to a trace callback (tests, profiling; bagua
// run's --trace). kWaitBegin/kWaitEnd bracket a wait for the buckets in
// flight (on the thread that waits).
struct TraceEvent {
  enum Kind { kGradientReady, kBucketLaunched, kBucketCommStart, kBucketCommEnd, kPostBackward, kWaitBegin, kWaitEnd };
  Kind kind;
  std::string name;  // parameter or bucket name ("" for the others)
  int64_t sequence;  // global order of events in this module
  std::chrono::steady_clock::time_point time;
  int64_t bytes = 0;  // kBucketCommEnd: bytes this rank sent for the bucket
};

class BaguaModule {
 public:
  BaguaModule(std::vector<std::pair<std::string, at::Tensor>> parameters,
              std::vector<std::pair<std::string, at::Tensor>> buffers,
              std::vector<OptimizerPtr> optimizers, AlgorithmPtr algorithm,
              WithBaguaOptions options);
  ~BaguaModule();
  BaguaModule(const BaguaModule&) = delete;
  BaguaModule& operator=(const BaguaModule&) = delete;

  // --- Bagua's documented attributes ---
  const std::vector<OptimizerPtr>& bagua_optimizers() const { return optimizers_; }
  const Algorithm& bagua_algorithm() const { return *algorithm_; }
  const std::vector<std::string>& parameters_to_ignore() const { return options_.parameters_to_ignore; }
  // Forward passes started through this module (incremented before the
  // algorithm's forward-pre hook, as Bagua does).
  int64_t bagua_train_step_counter() const { return step_counter_; }
  const std::vector<std::shared_ptr<Bucket>>& bagua_buckets() const { return buckets_; }
  // (name, parameter) of every parameter that requires grad and is not ignored.
  std::vector<std::pair<std::string, at::Tensor>> bagua_build_params() const;

  // Every parameter and buffer, in model order.
  const std::vector<std::pair<std::string, at::Tensor>>& named_parameters() const { return parameters_; }
  const std::vector<std::pair<std::string, at::Tensor>>& named_buffers() const { return buffers_; }
  const ProcessGroupPtr& process_group() const { return group_; }
  const WithBaguaOptions& options() const { return options_; }
  AlgorithmImpl& algorithm_impl() { return *impl_; }

  // Replaces the algorithm: the old one is shut down (on_shutdown), its
  // buckets go, the new one's come. Every rank must switch at the same point.
  void switch_algorithm(AlgorithmPtr algorithm);

  // Runs before each forward pass: resets the algorithm when it asks, and
  // runs its forward-pre hook.
  void pre_forward();
  // pre_forward(), then model->forward(args...) (C++ frontend models).
  template <typename Model, typename... Args>
  auto forward(Model& model, Args&&... args) {
    pre_forward();
    return model->forward(std::forward<Args>(args)...);
  }
  // pre_forward(), then forward() of a TorchScript module.
  c10::IValue forward(torch::jit::Module& module, std::vector<c10::IValue> inputs);

  // Steps every optimizer (after giving back a zero gradient to each hooked
  // parameter that zero_grad() cleared and backward did not fill), then
  // runs the algorithm's post-step hook.
  void step();
  // In place of step() when this iteration's optimizer step is skipped (a
  // NaN loss, say): no optimizer steps, and the algorithm ends the
  // iteration (AlgorithmImpl::on_step_skipped). Call one of the two after
  // every backward.
  void skip_step();
  // Clears every optimizer's gradients for the next backward. The hooked
  // parameters' (bagua_build_params) are set to none, as DDP at its best
  // does (set_to_none): backward writes them afresh instead of adding to
  // zeros, and a gradient bucket takes them as they come (the one tensor of
  // a one-tensor bucket is communicated where it lies; the others are
  // copied into the bucket's buffer as each becomes ready). step() gives a
  // zero gradient back to any of them that backward left undefined, so the
  // update is the one a zeroed gradient gives. Other parameters' gradients
  // are zeroed in place (LibTorch 1.13's zero_grad); a fused optimizer's
  // buffers are zeroed with one kernel each.
  void zero_grad();
  // Gradient accumulation (DDP's no_sync): with false, backward passes only
  // add to each parameter's gradient; the algorithm sees nothing (no bucket
  // is marked ready or sent, nothing is awaited). Set it back to true
  // before the backward of the step's last micro-batch, which then
  // communicates the sum as one backward would. Call pre_forward() once
  // per optimizer step (before the first micro-batch), not per micro-batch.
  void set_gradient_sync(bool sync);

  // Receives every TraceEvent (from autograd and communication threads).
  // Set it before training, not while a backward pass runs.
  void set_trace(std::function<void(const TraceEvent&)> trace);

  // The algorithm's background work (async averaging) stopped and started
  // again, with every rank's agreement; see AlgorithmImpl. Collective.
  void pause_background();
  void resume_background();
  // The algorithm's per-rank state, for checkpoints.
  void save_algorithm_state(torch::serialize::OutputArchive& archive) const;
  void load_algorithm_state(torch::serialize::InputArchive& archive);

  // Bytes this rank has sent for the algorithm (gradients, momentum or
  // weights), since with_bagua; see ProcessGroup::bytes_sent().
  int64_t bytes_sent() const { return impl_->bytes_sent(); }

  // Bucket autotune (WithBaguaOptions::autotune_buckets): what was tried
  // and chosen, once the choice is made; empty before, and without autotune.
  const std::optional<AutotuneResult>& autotune_result() const;

  // Waits until every launched bucket is done; rethrows the first failure.
  void wait_for_buckets();
  void trace(TraceEvent::Kind kind, const std::string& name, int64_t bytes = 0);

  struct Internals;
  class Context;

 private:
  void init_algorithm();
  void shutdown_algorithm();
  void install_hooks();
  void remove_hooks();
  void on_gradient_ready(size_t param);
  void mark_ready_locked(size_t bucket, size_t index);
  void reset_iteration_locked();
  void on_backward_end();
  void launch_ready_buckets();
  void launch(size_t bucket);
  void broadcast_initial_state();
  void autotune_at_step_start();
  void rebucket(int64_t bucket_bytes);

  std::vector<std::pair<std::string, at::Tensor>> parameters_;
  std::vector<std::pair<std::string, at::Tensor>> buffers_;
  std::vector<OptimizerPtr> optimizers_;
  AlgorithmPtr algorithm_;
  WithBaguaOptions options_;
  ProcessGroupPtr group_;
  std::vector<std::shared_ptr<Bucket>> buckets_;
  int64_t step_counter_ = 0;

  // Declared last, destroyed first: the algorithm (and any thread of its)
  // goes before the communication thread and the buckets it reads.
  std::unique_ptr<Internals> internals_;  // hooks, comm thread, iteration state
  std::unique_ptr<Context> context_;      // what the algorithm sees of this module
  std::unique_ptr<AlgorithmImpl> impl_;
};

// Wraps a C++ frontend module (torch::nn::Module or a ModuleHolder's *).
std::shared_ptr<BaguaModule> with_bagua(torch::nn::Module& module, std::vector<OptimizerPtr> optimizers,
                                        AlgorithmPtr algorithm, WithBaguaOptions options = {});
// Wraps a TorchScript module.
std::shared_ptr<BaguaModule> with_bagua(torch::jit::Module& module, std::vector<OptimizerPtr> optimizers,
                                        AlgorithmPtr algorithm, WithBaguaOptions options = {});

// True when `name` matches the glob `pattern` ('*' any run, '?' one char).
bool glob_match(const std::string& pattern, const std::string& name);

}  // namespace bagua
