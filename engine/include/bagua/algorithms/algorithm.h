// The algorithm framework (Bagua's bagua.torch_api.algorithms).
//
// An Algorithm is a declaration: a name and keyword arguments, cheap to
// copy, what a recipe names. reify() turns it into an AlgorithmImpl bound to
// a process group: the object whose hooks BaguaModule calls during training.
//
// Lifecycle, as BaguaModule drives it:
//   init:   init_tensors() -> bucket_options() -> buckets (BucketBuilder)
//           -> init_operations() once per bucket
//   each iteration:
//     on_forward_pre()                 before the forward pass
//     on_tensor_ready(bucket, index)   from autograd, as each registered
//                                      gradient is accumulated; buckets are
//                                      then launched in bucket order on the
//                                      module's communication thread, where
//                                      run_bucket() does the bucket's work
//     on_post_backward()               at the end of backward (default:
//                                      waits for every launched bucket)
//     on_post_step()                   after the optimizers stepped
//   need_reset()  checked before each forward: true re-runs init (QAdam
//                 leaving warm-up, say).
#pragma once

#include <bagua/bucket.h>
#include <bagua/communication.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace bagua {

class BaguaModule;

class AlgorithmImpl {
 public:
  explicit AlgorithmImpl(ProcessGroupPtr group) : group_(std::move(group)) {}
  virtual ~AlgorithmImpl() = default;

  // True when the module must re-initialise tensors and buckets before the
  // next forward pass.
  virtual bool need_reset(BaguaModule& module);

  // The tensors to communicate. Default: the gradient of every parameter
  // of module.bagua_build_params(), in reverse order (the order in which
  // backward produces them).
  virtual std::vector<BaguaTensor> init_tensors(BaguaModule& module);

  // How the tensors are split into buckets. Default: the module's bucket
  // size and flattening, no alignment.
  virtual BucketOptions bucket_options(BaguaModule& module);

  // Prepares per-bucket state once buckets exist. Default: nothing.
  virtual void init_operations(BaguaModule& module, Bucket& bucket);

  // Whether buckets are communicated from autograd hooks during backward.
  // Default true; algorithms that communicate weights instead return false.
  virtual bool communicates_during_backward() const { return true; }

  // The communication of one bucket; runs on the module's communication
  // thread, buckets strictly in order, and blocks until the bucket's data is
  // final. Default: nothing.
  virtual void run_bucket(BaguaModule& module, Bucket& bucket);

  virtual void on_forward_pre(BaguaModule& module);
  virtual void on_post_backward(BaguaModule& module);
  virtual void on_post_step(BaguaModule& module);

  const ProcessGroupPtr& process_group() const { return group_; }

 protected:
  ProcessGroupPtr group_;
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

}  // namespace bagua
