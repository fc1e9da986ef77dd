// LowPrecisionDecentralized (bagua/algorithms/low_precision_decentralized.h);
// what bagua knows of it without LibTorch is
// low_precision_decentralized_descriptor.cpp.
#include <bagua/algorithms/low_precision_decentralized.h>
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

class LowPrecisionDecentralizedImpl : public AlgorithmImpl {
  bool keeps_bucket_state() const override { return true; }  // the neighbours' weights, per bucket

 public:
  LowPrecisionDecentralizedImpl(ProcessGroupPtr group, bool hierarchical, int64_t interval)
      : AlgorithmImpl(std::move(group)), hierarchical_(hierarchical), interval_(interval) {}

  bool communicates_during_backward() const override { return false; }
  std::vector<BaguaTensor> init_tensors(AlgorithmContext& ctx) override { return algorithms::weight_tensors(ctx); }
  BucketOptions bucket_options(AlgorithmContext& ctx) override { return algorithms::weight_bucket_options(ctx); }
  bool on_tensor_ready(AlgorithmContext&, Bucket&, size_t) override { return false; }

  // w, L and R start as this rank's weights (the same on every rank after
  // with_bagua's broadcast); the other buffers are the step's scratch,
  // allocated once.
  void init_operations(AlgorithmContext&, Bucket& bucket) override {
    at::Tensor x = at::zeros({bucket.padded_numel()}, at::TensorOptions().dtype(bucket.dtype()).device(bucket.device()));
    bucket.copy_into(x);
    const int64_t n = x.numel(), bytes = MinMaxUInt8::compressed_bytes(n, 1);
    const auto byte_options = x.options().dtype(at::kByte);
    State& st = state_[bucket.name()];
    st.w = x.clone();
    st.left = x.clone();
    st.right = x.clone();
    if (hierarchical_) st.x = x;  // else the difference's buffer takes the weights
    st.diff = at::empty_like(x);
    st.mine = at::empty({bytes}, byte_options);
    st.from_left = at::empty({bytes}, byte_options);
    st.from_right = at::empty({bytes}, byte_options);
  }

  void on_post_step(AlgorithmContext& ctx) override {
    if (!communication_step(ctx.step_counter(), interval_)) return;
    algorithms::mark_all_ready(ctx);
    ctx.wait_for_buckets();
  }

  void run_bucket(AlgorithmContext&, Bucket& bucket) override {
    State& st = state_.at(bucket.name());
    // The padding takes part in the compression's min and max: keep it zero.
    auto zero_padding = [&](at::Tensor& t) {
      if (bucket.padded_numel() > bucket.numel()) t.narrow(0, bucket.numel(), bucket.padded_numel() - bucket.numel()).zero_();
    };
    if (!hierarchical_) {
      // The weights go straight into the difference's buffer, and the new
      // weights straight from w back: two model-sized copies fewer.
      bucket.copy_into(st.diff);
      zero_padding(st.diff);
      ring_step(st, comm_);
      bucket.write_back(st.w);
      return;
    }
    at::Tensor& x = st.x;
    bucket.copy_into(x);
    zero_padding(x);
    with_hierarchy(x, comm_, hierarchical_, [&](at::Tensor& weights, const ProcessGroupPtr& ring) {
      st.diff.copy_(weights);
      ring_step(st, ring);
      weights.copy_(st.w);
    });
    bucket.write_back(x);
  }

  void save_state(torch::serialize::OutputArchive& archive) const override {
    for (const auto& [name, st] : state_) {
      archive.write("lpd." + name + ".w", st.w);
      archive.write("lpd." + name + ".left", st.left);
      archive.write("lpd." + name + ".right", st.right);
    }
  }

  void load_state(torch::serialize::InputArchive& archive) override {
    for (auto& [name, st] : state_) {
      for (auto [key, tensor] : {std::pair<const char*, at::Tensor*>{"w", &st.w}, {"left", &st.left},
                                 {"right", &st.right}}) {
        at::Tensor loaded;
        if (!archive.try_read("lpd." + name + "." + key, loaded)) {
          throw Error("the checkpoint has no low_precision_decentralized state for bucket " + name +
                          " (was it written by another algorithm or model?)",
                      true);
        }
        tensor->copy_(loaded);
      }
    }
  }

 private:
  struct State {
    at::Tensor w, left, right;                // Bagua's state: own weights and the neighbours' replicas
    at::Tensor x, diff;                       // the step's weights (hierarchical) and difference
    at::Tensor mine, from_left, from_right;   // compressed differences
  };

  // One exchange around the ring of `ring` (Bagua's order of operations):
  // st.diff holds this step's weights x on entry; st.w the new weights on
  // return.
  void ring_step(State& st, const ProcessGroupPtr& ring) {
    at::NoGradGuard no_grad;
    at::Tensor& d = st.diff;
    const int64_t numel = d.numel();
    d.add_(st.left, 1.0 / 3).add_(st.right, 1.0 / 3).add_(st.w, -5.0 / 3);
    at::Tensor& c = st.mine;
    MinMaxUInt8::compress(d, c);
    const int n = ring->size(), r = ring->rank();
    at::Tensor* from_left = &c;  // a ring of one is its own neighbour
    at::Tensor* from_right = &c;
    if (n > 1) {
      const int left = (r - 1 + n) % n, right = (r + 1) % n;
      constexpr int kToLeft = 1, kToRight = 2;
      from_left = &st.from_left;
      from_right = &st.from_right;
      std::vector<Work> works;
      works.push_back(irecv(*from_left, left, ring, kToRight));
      works.push_back(irecv(*from_right, right, ring, kToLeft));
      works.push_back(isend(c, left, ring, kToLeft));
      works.push_back(isend(c, right, ring, kToRight));
      for (auto& w : works) w.wait();
      const int64_t bad_left = MinMaxUInt8::first_non_finite_chunk(*from_left, numel);
      const int64_t bad_right = MinMaxUInt8::first_non_finite_chunk(*from_right, numel);
      if (bad_left >= 0 || bad_right >= 0) {
        throw Error("low_precision_decentralized: a neighbour sent NaN or infinite weights; the training has "
                        "diverged",
                    true);
      }
    }
    if (MinMaxUInt8::first_non_finite_chunk(c, numel) >= 0) {
      throw Error("low_precision_decentralized: this rank's weights hold NaN or infinity; the training has diverged",
                  true);
    }
    MinMaxUInt8::decompress_add(*from_left, st.left);
    MinMaxUInt8::decompress_add(*from_right, st.right);
    MinMaxUInt8::decompress_add(c, st.w);
  }

  bool hierarchical_;
  int64_t interval_;
  std::map<std::string, State> state_;  // by bucket
};

}  // namespace

LowPrecisionDecentralized::LowPrecisionDecentralized(bool hierarchical, int64_t communication_interval)
    : hierarchical_(hierarchical), interval_(communication_interval) {
  if (interval_ < 1) throw InvalidArgument("low_precision_decentralized: communication_interval must be at least 1");
}

nlohmann::json LowPrecisionDecentralized::kwargs() const {
  return {{"hierarchical", hierarchical_}, {"communication_interval", interval_}};
}

std::unique_ptr<AlgorithmImpl> LowPrecisionDecentralized::reify(ProcessGroupPtr group) const {
  return std::make_unique<LowPrecisionDecentralizedImpl>(std::move(group), hierarchical_, interval_);
}

AlgorithmPtr make_low_precision_decentralized(const nlohmann::json& kw, const AlgorithmBuildContext&) {
  return std::make_shared<LowPrecisionDecentralized>(kw.at("hierarchical").get<bool>(),
                                                     kw.at("communication_interval").get<int64_t>());
}

}  // namespace bagua
