// LowPrecisionDecentralized (bagua/algorithms/low_precision_decentralized.h);
// what bagua knows of it without LibTorch is
// low_precision_decentralized_descriptor.cpp.
#include <bagua/algorithms/low_precision_decentralized.h>
#include <bagua/compression.h>
#include <bagua/errors.h>

#include "algorithms/factories.h"
#include "algorithms/peers.h"
#include "algorithms/weights.h"
#include "common/minmax_layout.h"

#include <ATen/ATen.h>

#include <map>
#include <stdexcept>

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
  // allocated once. In a ring of two, both neighbours are the one peer
  // and L and R receive the same differences (ring_step()): they stay
  // equal, so R is L, one tensor updated once (load_state() parts them
  // when a checkpoint's are not equal).
  void init_operations(AlgorithmContext&, Bucket& bucket) override {
    at::Tensor x = at::zeros({bucket.padded_numel()}, at::TensorOptions().dtype(bucket.dtype()).device(bucket.device()));
    bucket.copy_into(x);
    const int64_t n = x.numel(), bytes = MinMaxUInt8::compressed_bytes(n, 1);
    const auto byte_options = x.options().dtype(at::kByte);
    State& st = state_[bucket.name()];
    st.w = x.clone();
    st.left = x.clone();
    st.right = !hierarchical_ && comm_->size() == 2 ? st.left : x.clone();
    if (hierarchical_) st.x = x;  // else the difference is computed from the weights where they lie
    st.diff = at::empty_like(x);
    st.mine = at::empty({bytes}, byte_options);
    st.from_left = at::empty({bytes}, byte_options);
    // from_right: on first use (a ring of two has no use for it)
  }

  void on_post_step(AlgorithmContext& ctx) override {
    if (!communication_step(ctx.step_counter(), interval_)) return;
    algorithms::mark_all_ready(ctx);
    ctx.wait_for_buckets();
  }

  void run_bucket(AlgorithmContext&, Bucket& bucket) override {
    State& st = state_.at(bucket.name());
    at::NoGradGuard no_grad;
    if (!hierarchical_) {
      // From the weights where they lie, tensor by tensor, back into them.
      std::vector<at::Tensor> weights;
      for (const auto& t : bucket.tensors()) weights.push_back(t.get());
      if (!all_fast(st, weights)) {
        bucket.copy_into(st.diff);
        zero_padding(bucket, st.diff);
      }
      ring_step(st, comm_, weights);
      if (!all_fast(st, weights)) bucket.write_back(st.w);
      return;
    }
    at::Tensor& x = st.x;
    bucket.copy_into(x);
    zero_padding(bucket, x);  // the padding takes part in the compression's min and max: keep it zero
    with_hierarchy(x, comm_, hierarchical_, [&](at::Tensor& weights, const ProcessGroupPtr& ring) {
      if (!all_fast(st, {weights})) st.diff.copy_(weights);
      ring_step(st, ring, {weights});
      if (!all_fast(st, {weights})) weights.copy_(st.w);
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
      std::map<std::string, at::Tensor> loaded;
      for (const char* key : {"w", "left", "right"}) {
        if (!archive.try_read("lpd." + name + "." + key, loaded[key])) {
          throw Error("the checkpoint has no low_precision_decentralized state for bucket " + name +
                          " (was it written by another algorithm or model?)",
                      true);
        }
      }
      // A checkpoint of a larger ring (before a resize) has L and R apart.
      if (st.right.is_same(st.left) && !at::equal(loaded["left"], loaded["right"])) st.right = at::empty_like(st.left);
      st.w.copy_(loaded["w"]);
      st.left.copy_(loaded["left"]);
      if (!st.right.is_same(st.left)) st.right.copy_(loaded["right"]);
    }
  }

 private:
  struct State {
    at::Tensor w, left, right;                // Bagua's state: own weights and the neighbours' replicas
    at::Tensor x, diff;                       // the step's weights (hierarchical) and difference
    at::Tensor mine, from_left, from_right;   // compressed differences
  };

  static void zero_padding(const Bucket& bucket, at::Tensor& t) {
    if (bucket.padded_numel() > bucket.numel()) t.narrow(0, bucket.numel(), bucket.padded_numel() - bucket.numel()).zero_();
  }

  static bool fast_path(const at::Tensor& t) {
    return t.defined() && t.is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
  }

  // Whether the loops below take `x`, the step's weights in pieces that
  // lie end to end in the bucket's order (the rest, up to the bucket's
  // padded size, is padding).
  static bool all_fast(const State& st, const std::vector<at::Tensor>& x) {
    if (!fast_path(st.w) || !fast_path(st.left) || !fast_path(st.right) || !fast_path(st.diff)) return false;
    for (const at::Tensor& t : x) {
      if (!fast_path(t)) return false;
    }
    return true;
  }

  // One exchange around the ring of `ring` (Bagua's order of operations)
  // for the step's weights x: on return, st.w holds the new weights, and
  // so does x when all_fast(st, x) (else st.diff must hold x on entry, and the
  // caller copies st.w back).
  void ring_step(State& st, const ProcessGroupPtr& ring, const std::vector<at::Tensor>& x) {
    const bool fast = all_fast(st, x);
    // 1. The difference, x + L/3 + R/3 - 5/3 w, compressed.
    if (fast) {
      int64_t offset = 0;
      for (const at::Tensor& t : x) {
        ring_difference(t.data_ptr<float>(), st, offset, t.numel());
        offset += t.numel();
      }
      ring_difference(nullptr, st, offset, st.diff.numel() - offset);  // the padding: x = 0
    } else {
      st.diff.add_(st.left.mul(kThird)).add_(st.right.mul(kThird)).add_(st.w.mul(kMinusFiveThirds));
    }
    const int64_t numel = st.diff.numel();
    at::Tensor& c = st.mine;
    MinMaxUInt8::compress(st.diff, c);
    // 2. To both neighbours, from both.
    const int n = ring->size(), r = ring->rank();
    at::Tensor* from_left = &c;  // a ring of one is its own neighbour
    at::Tensor* from_right = &c;
    if (n > 1) {
      const int left = (r - 1 + n) % n, right = (r + 1) % n;
      constexpr int kToLeft = 1, kToRight = 2;
      from_left = &st.from_left;
      from_right = &st.from_right;
      std::vector<Work> works;
      if (left == right) {
        // A ring of two: both neighbours are the one peer, and Bagua's two
        // messages to it would carry the same bytes. One goes, and serves
        // as both.
        from_right = from_left;
        works.push_back(irecv(*from_left, left, ring, kToRight));
        works.push_back(isend(c, left, ring, kToRight));
      } else {
        if (!from_right->defined()) *from_right = at::empty_like(*from_left);  // once
        works.push_back(irecv(*from_left, left, ring, kToRight));
        works.push_back(irecv(*from_right, right, ring, kToLeft));
        works.push_back(isend(c, left, ring, kToLeft));
        works.push_back(isend(c, right, ring, kToRight));
      }
      for (auto& w : works) w.wait();
      const int64_t bad_left = MinMaxUInt8::first_non_finite_chunk(*from_left, numel);
      const int64_t bad_right =
          from_right == from_left ? bad_left : MinMaxUInt8::first_non_finite_chunk(*from_right, numel);
      if (bad_left >= 0 || bad_right >= 0) {
        throw DivergedError("low_precision_decentralized: a neighbour sent NaN or infinite weights; the training "
                            "has diverged");
      }
    }
    if (MinMaxUInt8::first_non_finite_chunk(c, numel) >= 0) {
      throw DivergedError("low_precision_decentralized: this rank's weights hold NaN or infinity; the training has "
                          "diverged");
    }
    // 3. The replicas and the weights take the decompressed differences.
    MinMaxUInt8::decompress_add(*from_left, st.left);
    if (st.right.is_same(st.left)) {
      if (from_right != from_left) throw std::logic_error("low_precision_decentralized: R is L outside a ring of two");
    } else {
      MinMaxUInt8::decompress_add(*from_right, st.right);
    }
    if (fast) {
      update_weights(c, st, x);
    } else {
      MinMaxUInt8::decompress_add(c, st.w);
    }
  }

  // diff[i] = x[i] + L[i]/3 + R[i]/3 - 5/3 w[i] for i in [offset, offset +
  // n), x read from x[0..n) (zeros when null), every product and every sum
  // rounded to float on its own: bitwise what
  // x.add(L.mul(1/3)).add(R.mul(1/3)).add(w.mul(-5/3)) gives in ATen on any
  // CPU, which is what the path for other tensors runs. (ATen's
  // add_(other, alpha) fuses the multiply-add on CPUs with FMA and not on
  // others.) One pass instead of a copy and three. This file is built with
  // -O3 and without contraction (engine/CMakeLists.txt).
  static void ring_difference(const float* x, State& st, int64_t offset, int64_t n) {
    const float* __restrict left = st.left.data_ptr<float>() + offset;
    const float* __restrict right = st.right.data_ptr<float>() + offset;  // may be left: both only read
    const float* __restrict w = st.w.data_ptr<float>() + offset;
    float* __restrict d = st.diff.data_ptr<float>() + offset;
    const float third = static_cast<float>(kThird), five_thirds = static_cast<float>(kMinusFiveThirds);
    if (x == nullptr) {
      for (int64_t i = 0; i < n; ++i) d[i] = ((0.0f + left[i] * third) + right[i] * third) + w[i] * five_thirds;
      return;
    }
    const float* __restrict in = x;
    for (int64_t i = 0; i < n; ++i) d[i] = ((in[i] + left[i] * third) + right[i] * third) + w[i] * five_thirds;
  }

  // w += decompress(c), the new values written to x too (its pieces end to
  // end, then the padding, which only w has): one pass, bitwise
  // decompress_add(c, w) and a copy.
  static void update_weights(const at::Tensor& c, State& st, const std::vector<at::Tensor>& x) {
    const minmax_layout::Levels levels = minmax_layout::levels_of(c.data_ptr<uint8_t>());
    float* w = st.w.data_ptr<float>();
    int64_t offset = 0;
    for (const at::Tensor& t : x) {
      float* __restrict out = t.data_ptr<float>();
      float* __restrict wo = w + offset;
      const uint8_t* __restrict bytes = levels.bytes + offset;
      for (int64_t i = 0, n = t.numel(); i < n; ++i) {
        const float v = wo[i] + levels.value[bytes[i]];
        wo[i] = v;
        out[i] = v;
      }
      offset += t.numel();
    }
    for (int64_t i = offset, n = st.w.numel(); i < n; ++i) w[i] += levels.value[levels.bytes[i]];
  }

  static constexpr double kThird = 1.0 / 3, kMinusFiveThirds = -5.0 / 3;

  bool hierarchical_;
  int64_t interval_;
  std::map<std::string, State> state_;  // by bucket
};

}  // namespace

LowPrecisionDecentralized::LowPrecisionDecentralized(bool hierarchical, int64_t communication_interval)
    : KeywordAlgorithm("low_precision_decentralized",
                       {{"hierarchical", hierarchical}, {"communication_interval", communication_interval}}) {
  if (communication_interval < 1) {
    throw InvalidArgument("low_precision_decentralized: communication_interval must be at least 1");
  }
}

std::unique_ptr<AlgorithmImpl> LowPrecisionDecentralized::reify(ProcessGroupPtr group) const {
  return std::make_unique<LowPrecisionDecentralizedImpl>(std::move(group), kwarg<bool>("hierarchical"),
                                                         kwarg<int64_t>("communication_interval"));
}

algorithms::AlgorithmFactory algorithms::low_precision_decentralized_factory() {
  return {[](const nlohmann::json& kw, const AlgorithmBuildContext&) -> AlgorithmPtr {
    return std::make_shared<LowPrecisionDecentralized>(kw.at("hierarchical").get<bool>(),
                                                       kw.at("communication_interval").get<int64_t>());
  }};
}

}  // namespace bagua
