// AsyncModelAverage (bagua/algorithms/async_model_average.h).
#include <bagua/algorithms/async_model_average.h>
#include <bagua/distributed.h>
#include <bagua/errors.h>

#include "algorithms/factories.h"

#include "algorithms/weights.h"

#include <ATen/ATen.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

namespace bagua {
namespace {

class AsyncImpl : public AlgorithmImpl {
 public:
  AsyncImpl(ProcessGroupPtr group, int64_t interval_ms, int64_t warmup)
      : AlgorithmImpl(std::move(group)), interval_ms_(interval_ms), warmup_(warmup) {
    // The averaging thread's own connections (collective, at reify).
    averaging_group_ = group_->duplicate();
    averaging_group_->set_verify_collectives(false);
  }

  ~AsyncImpl() override {
    // on_shutdown() has normally stopped the thread; never leave it running
    // over a destroyed object.
    if (thread_.joinable()) {
      request_abort();
      thread_.join();
    }
  }

  // The switch from gradient allreduce to averaging, once.
  bool need_reset(AlgorithmContext& ctx) override { return !async_phase_ && ctx.step_counter() >= warmup_; }

  std::vector<BaguaTensor> init_tensors(AlgorithmContext& ctx) override {
    async_phase_ = ctx.step_counter() >= warmup_;
    return async_phase_ ? algorithms::weight_tensors(ctx) : AlgorithmImpl::init_tensors(ctx);
  }
  BucketOptions bucket_options(AlgorithmContext& ctx) override {
    return async_phase_ ? algorithms::weight_bucket_options(ctx) : AlgorithmImpl::bucket_options(ctx);
  }
  bool communicates_during_backward() const override { return !async_phase_; }
  bool keeps_bucket_state() const override { return true; }  // the background loop reads the buckets
  bool on_tensor_ready(AlgorithmContext&, Bucket&, size_t) override { return !async_phase_; }

  // The averaging's buffers, once per weight bucket (a round allocating
  // model-sized tensors would page-fault them in again every round).
  void init_operations(AlgorithmContext&, Bucket& bucket) override {
    if (!async_phase_) return;
    const auto options = at::TensorOptions().dtype(bucket.dtype()).device(bucket.device());
    Round& r = rounds_[bucket.name()];
    r.snapshot = at::zeros({bucket.padded_numel()}, options);  // padding stays zero throughout
    r.sum = at::zeros_like(r.snapshot);
    r.current = at::zeros_like(r.snapshot);
  }

  // Warm-up: the exact average of the gradients.
  void run_bucket(AlgorithmContext&, Bucket& bucket) override {
    at::Tensor flat = bucket.flat();
    allreduce(flat, ReduceOp::AVG, comm_);
    bucket.write_back(flat);
  }

  void on_forward_pre(AlgorithmContext& ctx) override {
    rethrow_background_error();
    if (!async_phase_) return;
    if (!started_once_) start(ctx);  // the first step after the warm-up
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [&] { return !applying_; });
    training_ = true;
  }

  void on_post_step(AlgorithmContext&) override { end_training_step(); }
  // A skipped step ends the step too: else the averaging thread would wait
  // for it forever (in claim_weights()).
  void on_step_skipped(AlgorithmContext&) override { end_training_step(); }

  // The warm-up's gradients and the background averaging's weights.
  int64_t bytes_sent() const override { return comm_->bytes_sent() + averaging_group_->bytes_sent(); }

  void pause_background(AlgorithmContext&) override { stop(); }
  void resume_background(AlgorithmContext& ctx) override {
    if (async_phase_) start(ctx);
  }
  void on_shutdown(AlgorithmContext&) override { stop(); }

 private:
  void start(AlgorithmContext& ctx) {
    if (thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      abort_requested_ = false;
    }
    started_once_ = true;
    thread_ = std::thread([this, &ctx] { loop(ctx); });
  }

  void end_training_step() {
    if (!async_phase_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    training_ = false;
    idle_.notify_all();
  }

  // Returns once every rank has asked to stop (the thread's agreement).
  // Called by the training thread between steps, so no step holds the
  // weights.
  void stop() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      training_ = false;
    }
    request_abort();
    thread_.join();
  }

  void request_abort() {
    std::lock_guard<std::mutex> lock(mutex_);
    abort_requested_ = true;
    wake_.notify_all();
    idle_.notify_all();
  }

  void rethrow_background_error() {
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::swap(error, error_);
    }
    if (error) std::rethrow_exception(error);
  }

  // Waits until no training step is running on this rank, then marks the
  // weights as in use by the averaging.
  void claim_weights() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [&] { return !training_; });
    applying_ = true;
  }
  void release_weights() {
    std::lock_guard<std::mutex> lock(mutex_);
    applying_ = false;
    idle_.notify_all();
  }

  void loop(AlgorithmContext& ctx) {
    try {
      const double n = static_cast<double>(averaging_group_->size());
      for (;;) {
        bool asked;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          wake_.wait_for(lock, std::chrono::milliseconds(interval_ms_), [&] { return abort_requested_; });
          asked = abort_requested_;
        }
        // Go on unless every rank has asked to stop.
        at::Tensor stop_all = at::tensor({asked ? 1.0 : 0.0}, at::kDouble);
        allreduce(stop_all, ReduceOp::MIN, averaging_group_);
        if (stop_all.item<double>() > 0) break;
        const auto& buckets = ctx.buckets();
        claim_weights();
        for (const auto& b : buckets) b->copy_into(rounds_.at(b->name()).snapshot);
        release_weights();
        for (const auto& b : buckets) {
          Round& r = rounds_.at(b->name());
          r.sum.copy_(r.snapshot);
          allreduce(r.sum, ReduceOp::SUM, averaging_group_);
        }
        claim_weights();
        for (const auto& b : buckets) {
          at::NoGradGuard no_grad;
          Round& r = rounds_.at(b->name());
          b->copy_into(r.current);
          r.current.add_(r.sum.div_(n).sub_(r.snapshot));
          b->write_back(r.current);
        }
        release_weights();
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bagua: async model averaging stopped: %s\n", e.what());
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      applying_ = false;
      idle_.notify_all();
    }
  }

  int64_t interval_ms_;
  int64_t warmup_;
  ProcessGroupPtr averaging_group_;
  bool async_phase_ = false;
  bool started_once_ = false;

  std::mutex mutex_;
  std::condition_variable wake_;  // the thread's sleep between rounds
  std::condition_variable idle_;  // training_ / applying_ changed
  bool abort_requested_ = false;
  bool training_ = false;  // this rank is between forward-pre and the end of its optimizer step
  bool applying_ = false;  // the thread reads or writes the weights
  std::exception_ptr error_;
  struct Round {
    at::Tensor snapshot, sum, current;  // the weights sent, the sum received, the weights updated
  };
  std::map<std::string, Round> rounds_;  // by bucket, made before the thread starts
  std::thread thread_;  // last: joined (destructor) before the members above go
};

AsyncImpl& async_impl_of(BaguaModule& module, const char* what) {
  auto* impl = dynamic_cast<AsyncImpl*>(&module.algorithm_impl());
  if (impl == nullptr) {
    throw InvalidArgument(std::string("AsyncModelAverage::") + what + ": the module's algorithm is " +
                          module.bagua_algorithm().name() + ", not async");
  }
  return *impl;
}

}  // namespace

AsyncModelAverage::AsyncModelAverage(std::string peer_selection_mode, int64_t sync_interval_ms, int64_t warmup_steps)
    : KeywordAlgorithm("async", {{"peer_selection_mode", peer_selection_mode},
                                 {"sync_interval_ms", sync_interval_ms},
                                 {"warmup_steps", warmup_steps}}) {
  if (peer_selection_mode != "all") {
    throw InvalidArgument("async: peer_selection_mode must be all (the only mode of Bagua's async), got '" +
                          peer_selection_mode + "'");
  }
  if (sync_interval_ms < 1) throw InvalidArgument("async: sync_interval_ms must be at least 1");
  if (warmup_steps < 0) throw InvalidArgument("async: warmup_steps must be >= 0");
}

std::unique_ptr<AlgorithmImpl> AsyncModelAverage::reify(ProcessGroupPtr group) const {
  return std::make_unique<AsyncImpl>(std::move(group), sync_interval_ms(), warmup_steps());
}

void AsyncModelAverage::abort(BaguaModule& module) const {
  async_impl_of(module, "abort");
  module.pause_background();
}

void AsyncModelAverage::resume(BaguaModule& module) const {
  async_impl_of(module, "resume");
  module.resume_background();
}

algorithms::AlgorithmFactory algorithms::async_factory() {
  return {[](const nlohmann::json& kw, const AlgorithmBuildContext&) -> AlgorithmPtr {
    return std::make_shared<AsyncModelAverage>(kw.at("peer_selection_mode").get<std::string>(),
                                               kw.at("sync_interval_ms").get<int64_t>(),
                                               kw.at("warmup_steps").get<int64_t>());
  }};
}

}  // namespace bagua
