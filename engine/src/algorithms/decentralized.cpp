// Decentralized (bagua/algorithms/decentralized.h); what bagua knows of it
// without LibTorch is decentralized_descriptor.cpp.
#include <bagua/algorithms/decentralized.h>
#include <bagua/compression.h>
#include <bagua/errors.h>

#include "algorithms/factories.h"
#include "algorithms/peers.h"
#include "algorithms/weights.h"

#include <ATen/ATen.h>

#include <map>

namespace bagua {

namespace {

using algorithms::communication_step;
using algorithms::peer_group;
using algorithms::with_hierarchy;

class DecentralizedImpl : public AlgorithmImpl {
 public:
  DecentralizedImpl(ProcessGroupPtr group, bool hierarchical, std::string mode, int64_t interval)
      : AlgorithmImpl(std::move(group)), hierarchical_(hierarchical), mode_(std::move(mode)), interval_(interval) {
    if (mode_ == "shift_one") {
      auto peers = peer_group(comm_, hierarchical_);
      if (peers) shift_one_peer(peers->rank(), peers->size(), 0);  // an odd count fails here, on every rank
    }
  }

  bool communicates_during_backward() const override { return false; }
  std::vector<BaguaTensor> init_tensors(AlgorithmContext& ctx) override { return algorithms::weight_tensors(ctx); }
  BucketOptions bucket_options(AlgorithmContext& ctx) override { return algorithms::weight_bucket_options(ctx); }
  bool on_tensor_ready(AlgorithmContext&, Bucket&, size_t) override { return false; }

  // The buffers of a bucket's exchange, once: its size in weights, for the
  // group this rank exchanges with (none for a non-leader).
  void init_operations(AlgorithmContext&, Bucket& bucket) override {
    auto peers = peer_group(comm_, hierarchical_);
    const auto options = at::TensorOptions().dtype(bucket.dtype()).device(bucket.device());
    Buffers& b = buffers_[bucket.name()];
    b.all = algorithms::AverageWorkspace(bucket.padded_numel(), mode_ == "all" && peers ? peers->size() : 1,
                                         options);
    if (mode_ == "shift_one") b.theirs = at::empty({bucket.padded_numel()}, options);
  }

  // At a communication step, the weights go out while forward and backward run.
  void on_forward_pre(AlgorithmContext& ctx) override {
    communicating_ = communication_step(ctx.step_counter(), interval_);
    if (!communicating_) return;
    round_ = (ctx.step_counter() - 1) / interval_;
    algorithms::mark_all_ready(ctx);
  }

  void run_bucket(AlgorithmContext&, Bucket& bucket) override {
    Buffers& b = buffers_.at(bucket.name());
    at::Tensor& flat = b.all.values();  // a copy: the weights stay untouched until after backward
    bucket.copy_into(flat);
    with_hierarchy(flat, comm_, hierarchical_, [&](at::Tensor& x, const ProcessGroupPtr& peers) {
      if (mode_ == "all") {
        algorithms::average_all(b.all, peers);
        return;
      }
      const int peer = shift_one_peer(peers->rank(), peers->size(), round_);
      Work sent = isend(x, peer, peers);
      Work got = irecv(b.theirs, peer, peers);
      sent.wait();
      got.wait();
      x.add_(b.theirs).div_(2);
    });
  }

  // After backward: the average replaces the weights; the optimizer then
  // applies the local gradient.
  void on_post_backward(AlgorithmContext& ctx) override {
    ctx.wait_for_buckets();
    if (!communicating_) return;
    for (const auto& bucket : ctx.buckets()) bucket->write_back(buffers_.at(bucket->name()).all.values());
    communicating_ = false;
  }

 private:
  bool hierarchical_;
  std::string mode_;
  int64_t interval_;
  bool communicating_ = false;
  int64_t round_ = 0;  // which communication step this is (shift_one's k)
  struct Buffers {
    algorithms::AverageWorkspace all;  // its values(): the weights sent, then their average
    at::Tensor theirs;                 // shift_one: the peer's weights
  };
  std::map<std::string, Buffers> buffers_;  // by bucket, made before training; filled on the comm thread
};

}  // namespace

Decentralized::Decentralized(bool hierarchical, std::string peer_selection_mode, int64_t communication_interval)
    : KeywordAlgorithm("decentralized", {{"hierarchical", hierarchical},
                                         {"peer_selection_mode", peer_selection_mode},
                                         {"communication_interval", communication_interval}}) {
  if (peer_selection_mode != "all" && peer_selection_mode != "shift_one") {
    throw InvalidArgument("decentralized: peer_selection_mode must be all or shift_one, got '" +
                          peer_selection_mode + "'");
  }
  if (communication_interval < 1) throw InvalidArgument("decentralized: communication_interval must be at least 1");
}

std::unique_ptr<AlgorithmImpl> Decentralized::reify(ProcessGroupPtr group) const {
  return std::make_unique<DecentralizedImpl>(std::move(group), kwarg<bool>("hierarchical"),
                                             kwarg<std::string>("peer_selection_mode"),
                                             kwarg<int64_t>("communication_interval"));
}

algorithms::AlgorithmFactory algorithms::decentralized_factory() {
  return {[](const nlohmann::json& kw, const AlgorithmBuildContext&) -> AlgorithmPtr {
    return std::make_shared<Decentralized>(kw.at("hierarchical").get<bool>(),
                                           kw.at("peer_selection_mode").get<std::string>(),
                                           kw.at("communication_interval").get<int64_t>());
  }};
}

}  // namespace bagua
