// The algorithm framework (Bagua's bagua.torch_api.algorithms).
//
// An Algorithm is a declaration: a name and keyword arguments, cheap to
// copy, what a recipe names. reify() turns it into an AlgorithmImpl bound to
// a process group: the object whose hooks the module (BaguaModule) calls
// during training. Hooks see the module only through AlgorithmContext, a
// narrow interface, so algorithms never depend on the module's internals.
//
// Lifecycle, as the module drives it:
//   init:   init_tensors() -> bucket_options() -> buckets -> init_operations()
//           once per bucket
//   each iteration:
//     need_reset()            before the forward pass; true re-runs init
//                             (QAdam leaving warm-up, say)
//     (step counter += 1)
//     on_forward_pre()        before the forward pass (may mark tensors
//                             ready: decentralized sends weights here)
//     on_tensor_ready(b, i)   from autograd, as the gradient of the
//                             parameter behind registered tensor i of
//                             bucket b is accumulated; returning true marks
//                             that tensor ready. Buckets whose tensors are
//                             all ready are launched in bucket order on the
//                             module's communication thread, where
//                             run_bucket() does the bucket's work.
//     on_post_backward()      at the end of backward (default: waits for
//                             every launched bucket)
//     on_post_step()          after the optimizers stepped, or
//     on_step_skipped()       instead, when the caller skips the optimizer
//                             step (BaguaModule::skip_step(): a NaN under
//                             train.on_nonfinite: skip_step)
//   on_shutdown()   before the module (or this algorithm, on a switch) is
//                   torn down: stop background work here.
#pragma once

#include <bagua/bucket.h>
#include <bagua/communication.h>

#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace bagua {

using OptimizerPtr = std::shared_ptr<torch::optim::Optimizer>;

// An optimizer that zeroes its parameters' gradients itself, keeping them in
// storage of its own (FusedOptimizer): BaguaModule::zero_grad() calls
// zero_grad_in_place() on an optimizer that is one, Optimizer::zero_grad()
// on the others.
class ZeroesGradientsInPlace {
 public:
  virtual ~ZeroesGradientsInPlace() = default;
  virtual void zero_grad_in_place() = 0;
};

// What an algorithm may use of the module it runs in.
class AlgorithmContext {
 public:
  virtual ~AlgorithmContext() = default;

  // (name, parameter) of every parameter that requires grad and is not
  // ignored, in model order.
  virtual std::vector<std::pair<std::string, at::Tensor>> build_params() const = 0;
  virtual const std::vector<OptimizerPtr>& optimizers() const = 0;
  // The buckets made from init_tensors() (empty before they exist).
  virtual const std::vector<std::shared_ptr<Bucket>>& buckets() const = 0;
  // Marks registered tensor `index` of bucket `bucket` ready for this
  // iteration and launches every bucket now complete, in bucket order
  // (run_bucket() on the communication thread). Thread-safe.
  virtual void mark_ready(size_t bucket, size_t index) = 0;
  // Runs `job` on the communication thread after the jobs already there.
  virtual void submit(std::function<void()> job) = 0;
  // Waits until every launched bucket and submitted job is done; rethrows
  // the first failure.
  virtual void wait_for_buckets() = 0;
  // Forward passes started so far (Bagua's bagua_train_step_counter): 1
  // during the first iteration.
  virtual int64_t step_counter() const = 0;
  // The group the module trains over.
  virtual const ProcessGroupPtr& process_group() const = 0;
  // with_bagua's bucket size (bytes) and flattening.
  virtual int64_t bucket_bytes() const = 0;
  virtual bool do_flatten() const = 0;
  // The caller may skip optimizer steps (BaguaModule::skip_step()): an
  // algorithm that changes state during backward keeps what it needs to
  // undo that (WithBaguaOptions::may_skip_steps). Default false.
  virtual bool may_skip_steps() const { return false; }
};

class AlgorithmImpl {
 public:
  // Makes comm_group(): a duplicate of `group` with its own connections
  // (collective: every rank reifies the same algorithm at the same point);
  // in a world of one, `group` itself.
  explicit AlgorithmImpl(ProcessGroupPtr group);
  virtual ~AlgorithmImpl() = default;

  // True when the module must re-initialise tensors and buckets before the
  // next forward pass. Default false.
  virtual bool need_reset(AlgorithmContext& ctx);

  // The tensors to communicate. Default: the gradient of every parameter
  // of ctx.build_params(), in reverse order (the order in which backward
  // produces them), each named after its parameter.
  virtual std::vector<BaguaTensor> init_tensors(AlgorithmContext& ctx);

  // How the tensors are split into buckets. Default: the module's bucket
  // size and flattening, no alignment.
  virtual BucketOptions bucket_options(AlgorithmContext& ctx);

  // Prepares per-bucket state once buckets exist. Default: nothing.
  virtual void init_operations(AlgorithmContext& ctx, Bucket& bucket);

  // True when the registered tensors become ready during backward
  // (gradients, or momentum made from them): then each must be ready when
  // backward ends, else the rank names the parameters that got no gradient
  // instead of leaving its peers waiting. Default true; algorithms that
  // send weights (marked ready elsewhere) return false.
  virtual bool communicates_during_backward() const { return true; }

  // True when, in a world of one, the algorithm would leave every tensor as
  // it is (an average or sum of one gradient): the module then makes no
  // buckets and its hooks do nothing, so a one-worker run makes no pass
  // over the gradients, sends nothing and starts no communication thread.
  // Default false (compression changes values even alone).
  virtual bool idle_when_alone() const { return false; }

  // True when per-bucket state lives across steps (copies of the peers'
  // weights, a background averaging loop): the buckets then cannot be
  // rebuilt mid-training, so bucket autotune is refused. Default false.
  virtual bool keeps_bucket_state() const { return false; }

  // From autograd, when the gradient of the parameter behind registered
  // tensor `index` of `bucket` has been accumulated. Return true to mark
  // that tensor ready for communication. Default: true (the tensor is the
  // gradient). Runs on autograd's thread.
  virtual bool on_tensor_ready(AlgorithmContext& ctx, Bucket& bucket, size_t index);

  // The communication of one bucket; runs on the module's communication
  // thread, buckets strictly in order, and blocks until the bucket's data is
  // final. Default: nothing.
  virtual void run_bucket(AlgorithmContext& ctx, Bucket& bucket);

  virtual void on_forward_pre(AlgorithmContext& ctx);
  virtual void on_post_backward(AlgorithmContext& ctx);
  virtual void on_post_step(AlgorithmContext& ctx);
  // In place of on_post_step() when this iteration's optimizer step is
  // skipped: whatever on_forward_pre() began must end here too (async's
  // hold on the weights). Default: nothing.
  virtual void on_step_skipped(AlgorithmContext& ctx);
  // Before teardown: stop background work. Default: nothing.
  virtual void on_shutdown(AlgorithmContext& ctx);

  // Work that runs beside training (async's background averaging) stops
  // here, with every rank's agreement, and starts again in resume_
  // background(): the trainer brackets evaluation and checkpoints with
  // them. Both collective; defaults do nothing.
  virtual void pause_background(AlgorithmContext& ctx);
  virtual void resume_background(AlgorithmContext& ctx);

  // State of this rank's algorithm that a checkpoint must hold (peer
  // replicas, counters), keyed by names of the algorithm's choosing.
  // Defaults: none.
  virtual void save_state(torch::serialize::OutputArchive& archive) const;
  virtual void load_state(torch::serialize::InputArchive& archive);

  const ProcessGroupPtr& process_group() const { return group_; }
  // The group an algorithm's own traffic goes through: the process group's
  // members over their own connections, so it never interleaves with the
  // user's collectives, and without the per-call argument check (every rank
  // builds identical buckets).
  const ProcessGroupPtr& comm_group() const { return comm_; }
  // Bytes this rank sent for the algorithm (comm_group()'s counter, its
  // sub-groups included): what `comm_bytes` in metrics.jsonl reports.
  virtual int64_t bytes_sent() const { return comm_->bytes_sent(); }

 protected:
  ProcessGroupPtr group_;
  ProcessGroupPtr comm_;
};

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  // The registry name, e.g. "gradient_allreduce".
  virtual std::string name() const = 0;
  // The keyword arguments, defaults filled in.
  virtual nlohmann::json kwargs() const = 0;
  virtual std::unique_ptr<AlgorithmImpl> reify(ProcessGroupPtr group) const = 0;
};

using AlgorithmPtr = std::shared_ptr<const Algorithm>;

// What every algorithm's declaration shares: its registry name and keyword
// arguments, given once to the constructor, which name() and kwargs()
// answer and kwarg() reads. An algorithm derives from it, declares its
// constructor (the keyword arguments as typed parameters, Bagua's
// defaults) and reify(), and defines them in its source.
class KeywordAlgorithm : public Algorithm {
 public:
  std::string name() const final { return name_; }
  nlohmann::json kwargs() const final { return kwargs_; }
  // The keyword argument `key`, as T (kwargs() holds every one).
  template <typename T>
  T kwarg(const std::string& key) const {
    return kwargs_.at(key).template get<T>();
  }

 protected:
  KeywordAlgorithm(std::string name, nlohmann::json kwargs) : name_(std::move(name)), kwargs_(std::move(kwargs)) {}

 private:
  std::string name_;
  nlohmann::json kwargs_;
};

// An optimizer whose state the algorithm that requires it
// (AlgorithmTraits::required_optimizer) averages across ranks in place of
// the gradients (QAdamOptimizer's momentum): a non-finite value in it
// reaches every rank as one in a gradient would, so whoever checks the
// gradients checks these too.
class AveragedOptimizerState {
 public:
  virtual ~AveragedOptimizerState() = default;
  // The optimizer state the algorithm averages across ranks in place of
  // gradients, as (parameter, state tensor) pairs; empty while nothing is
  // averaged yet.
  virtual std::vector<std::pair<at::Tensor, at::Tensor>> averaged_state() const = 0;
};

}  // namespace bagua
