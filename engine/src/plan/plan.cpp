// make_plan() and plan_to_json() (bagua/plan.h): a run predicted from its
// recipe, its model's parameter list and its data, with no worker started.
//
// The traffic of each algorithm is written down as the list of collectives
// its AlgorithmImpl issues for one step (or round), each counted with the
// rule of engine/src/comm/collectives.cpp; keep the two in step (test_plan
// holds the predictions against real runs of every algorithm).
#include <bagua/plan.h>

#include <bagua/algorithms/decentralized.h>
#include <bagua/algorithms/registry.h>
#include <bagua/bucket.h>
#include <bagua/compression.h>
#include <bagua/data.h>
#include <bagua/distributed.h>
#include <bagua/errors.h>
#include <bagua/trainer.h>

#include "comm/verify.h"
#include "train/components.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <algorithm>
#include <map>

namespace bagua {

namespace {

// ---------------------------------------------------------------- counting

// The collectives the algorithms issue, as ProcessGroup::bytes_sent()
// counts them (collectives.cpp): a share of the payload per call, rounded to
// the nearest byte per call.
enum class Op { kAllreduce, kReduce, kBroadcast, kAlltoall, kAllgather, kSend };

int64_t counted(Op op, int group_size, int64_t bytes) {
  if (bytes <= 0 || group_size <= 1) return 0;  // an empty tensor or a group of one moves nothing
  const double share = static_cast<double>(group_size - 1) / group_size;
  double fraction = 0;
  switch (op) {
    case Op::kAllreduce: fraction = 2 * share; break;  // a ring's reduce-scatter and allgather
    case Op::kReduce:
    case Op::kBroadcast:
    case Op::kAlltoall: fraction = share; break;
    case Op::kAllgather: fraction = group_size - 1; break;  // of its input
    case Op::kSend: fraction = 1.0; break;
  }
  return static_cast<int64_t>(static_cast<double>(bytes) * fraction + 0.5);
}

enum class Where { kWholeGroup, kWithinNode, kBetweenNodes };

// The calls of one step (or round), for a node leader and for the others.
struct Ledger {
  PlanTraffic leader, other;
  // `leaders_only`: issued by the node leaders alone (a hierarchical
  // algorithm's exchange among them).
  void add(Op op, int group_size, int64_t bytes, Where where, bool leaders_only = false) {
    const int64_t n = counted(op, group_size, bytes);
    for (PlanTraffic* t : {&leader, &other}) {
      if (leaders_only && t == &other) continue;
      (where == Where::kWholeGroup ? t->whole_group : where == Where::kWithinNode ? t->within_node
                                                                                   : t->between_nodes) += n;
    }
  }
};

// ---------------------------------------------------------------- context

// What every algorithm's prediction starts from.
struct Context {
  const Recipe& recipe;
  PlanWorld world;
  // The tensors BaguaModule registers, in its order: the build parameters
  // (trainable, not ignored) in reverse model order, as gradients, momentum
  // or weights of the same shapes and dtypes.
  std::vector<BaguaTensor> tensors;
  int64_t qadam_warmup = OptimizerSpec{}.warmup_steps;
  bool qadam_optimizer = false;  // the recipe's optimizers are [qadam]
};

// Bytes of a reduction's wire tensor (allreduce, reduce): Gloo has no
// float16/bfloat16 reductions, so they travel as float32 there
// (comm/reduction.cpp); every other dtype as it is.
int64_t reduction_bytes(const Context& ctx, c10::ScalarType dtype, int64_t numel) {
  const bool widened = ctx.world.backend == "gloo" &&
                       (dtype == c10::ScalarType::Half || dtype == c10::ScalarType::BFloat16);
  return numel * (widened ? 4 : static_cast<int64_t>(c10::elementSize(dtype)));
}

int64_t element_bytes(c10::ScalarType dtype) { return static_cast<int64_t>(c10::elementSize(dtype)); }

// The buckets make_buckets() builds from the registered tensors with these
// options. Always planned unflattened: the split is the same, and no
// buffer is allocated for a prediction.
PlanBuckets bucket_plan(const Context& ctx, int64_t alignment, bool flatten, std::string registers) {
  PlanBuckets out;
  out.registers = std::move(registers);
  out.flatten = flatten;
  out.bucket_bytes = ctx.recipe.algorithm.bucket_size;
  out.bucket_size_auto = ctx.recipe.algorithm.bucket_size_auto;
  out.alignment = alignment;
  if (ctx.tensors.empty()) return out;
  BucketOptions options;
  options.bucket_bytes = ctx.recipe.algorithm.bucket_size;
  options.alignment = alignment;
  options.flatten = false;
  for (const auto& b : make_buckets(ctx.tensors, options)) {
    PlanBucket p;
    p.name = b->name();
    p.dtype = b->dtype();
    for (const auto& t : b->tensors()) p.tensors.push_back(t.name);
    p.numel = b->numel();
    p.padded_numel = b->padded_numel();
    p.bytes = b->bytes();
    p.padding_bytes = (p.padded_numel - p.numel) * element_bytes(p.dtype);
    out.bytes += p.bytes;
    out.padding_bytes += p.padding_bytes;
    out.buckets.push_back(std::move(p));
  }
  return out;
}

int64_t largest_bucket(const PlanBuckets& buckets) {
  int64_t m = 0;
  for (const auto& b : buckets.buckets) m = std::max(m, b.bytes);
  return m;
}

PlanPhase phase_of(std::string name, std::string what, const Ledger& l, int64_t first = 1,
                   std::optional<int64_t> last = std::nullopt, int64_t every = 1) {
  PlanPhase p;
  p.name = std::move(name);
  p.what = std::move(what);
  p.first_step = first;
  p.last_step = last;
  p.every = every;
  p.leader = l.leader;
  p.other = l.other;
  return p;
}

bool kwarg_bool(const nlohmann::json& kw, const char* key) { return kw.value(key, false); }

// ---------------------------------------------------------------- the algorithms

// A full-precision allreduce of every bucket, flat or hierarchical
// (GradientAllReduceImpl::run_bucket; QAdam's and async's warm-ups, flat).
Ledger allreduce_ledger(const Context& ctx, const PlanBuckets& buckets, bool hierarchical) {
  const PlanWorld& w = ctx.world;
  Ledger l;
  for (const auto& b : buckets.buckets) {
    const int64_t wire = reduction_bytes(ctx, b.dtype, b.padded_numel);
    if (!hierarchical) {
      l.add(Op::kAllreduce, w.world_size, wire, Where::kWholeGroup);
    } else {
      l.add(Op::kReduce, w.nproc_per_node, wire, Where::kWithinNode);
      l.add(Op::kAllreduce, w.nnodes, wire, Where::kBetweenNodes, true);
      l.add(Op::kBroadcast, w.nproc_per_node, b.bytes, Where::kWithinNode);
    }
  }
  return l;
}

// algorithms::compressed_allreduce() over a group of m on `numel` values:
// an alltoall of m compressed chunks, an allgather of one.
void add_compressed_allreduce(Ledger& l, int64_t numel, int m, Where where, bool leaders_only) {
  const int64_t stride = MinMaxUInt8::chunk_stride(numel, m);
  l.add(Op::kAlltoall, m, m * stride, where, leaders_only);
  l.add(Op::kAllgather, m, stride, where, leaders_only);
}

// algorithms::centralized_low_precision() on every bucket (ByteGrad; QAdam
// after its warm-up).
Ledger low_precision_ledger(const Context& ctx, const PlanBuckets& buckets, bool hierarchical) {
  const PlanWorld& w = ctx.world;
  Ledger l;
  for (const auto& b : buckets.buckets) {
    if (!hierarchical) {
      add_compressed_allreduce(l, b.padded_numel, w.world_size, Where::kWholeGroup, false);
    } else {
      l.add(Op::kReduce, w.nproc_per_node, reduction_bytes(ctx, b.dtype, b.padded_numel), Where::kWithinNode);
      add_compressed_allreduce(l, b.padded_numel, w.nnodes, Where::kBetweenNodes, true);
      l.add(Op::kBroadcast, w.nproc_per_node, b.bytes, Where::kWithinNode);
    }
  }
  return l;
}

// LowPrecisionWorkspace of every bucket, on the ranks that run the
// compressed exchange (all, or the node leaders), over a group of m.
int64_t low_precision_workspace_bytes(const PlanBuckets& buckets, int m) {
  int64_t total = 0;
  for (const auto& b : buckets.buckets) {
    const int64_t stride = MinMaxUInt8::chunk_stride(b.padded_numel, m);
    const int64_t per = MinMaxUInt8::chunk_numel(b.padded_numel, m);
    total += 3 * m * stride + stride;  // packed, received, gathered; this rank's share compressed
    total += 2 * per * 4;              // the share and one decompressed chunk, float32
    if (b.dtype != c10::ScalarType::Float) total += b.padded_numel * 4;  // a float32 result to copy back
  }
  return total;
}

PlanAlgorithm plan_gradient_allreduce(const Context& ctx, const nlohmann::json& kw) {
  PlanAlgorithm a;
  const bool hier = kwarg_bool(kw, "hierarchical");
  a.buckets = bucket_plan(ctx, 1, ctx.recipe.algorithm.flatten, "gradients");
  a.phases.push_back(phase_of("every step",
                              hier ? "each gradient bucket reduced to the node leader, allreduced among the leaders, "
                                     "broadcast in the node"
                                   : "an allreduce of each gradient bucket",
                              allreduce_ledger(ctx, a.buckets, hier)));
  if (!a.buckets.flatten) a.transient_bytes = largest_bucket(a.buckets);  // Bucket::flat()'s copy
  return a;
}

PlanAlgorithm plan_bytegrad(const Context& ctx, const nlohmann::json& kw) {
  PlanAlgorithm a;
  const bool hier = kwarg_bool(kw, "hierarchical");
  // ByteGradImpl::bucket_options: a multiple of the world size, so a bucket
  // cuts into one equal chunk per rank.
  a.buckets = bucket_plan(ctx, ctx.world.world_size, ctx.recipe.algorithm.flatten, "gradients");
  a.phases.push_back(phase_of("every step",
                              hier ? "each gradient bucket reduced to the node leader in full precision, 8-bit "
                                     "alltoall and allgather among the leaders, broadcast in the node"
                                   : "each gradient bucket as 8-bit chunks: an alltoall, then an allgather",
                              low_precision_ledger(ctx, a.buckets, hier)));
  a.buffer_bytes = low_precision_workspace_bytes(a.buckets, hier ? ctx.world.nnodes : ctx.world.world_size);
  if (!a.buckets.flatten) a.transient_bytes = largest_bucket(a.buckets);
  return a;
}

PlanAlgorithm plan_qadam(const Context& ctx, const nlohmann::json& kw) {
  PlanAlgorithm a;
  const bool hier = kwarg_bool(kw, "hierarchical");
  const int64_t w = ctx.qadam_warmup;
  // QAdamImpl pads like ByteGrad in both phases; the momentum buckets have
  // the gradients' shapes, so they split the same way.
  a.buckets = bucket_plan(ctx, ctx.world.world_size, ctx.recipe.algorithm.flatten, "gradients, then momentum");
  a.phases.push_back(phase_of("warm-up", "an allreduce of each gradient bucket (exact Adam)",
                              allreduce_ledger(ctx, a.buckets, /*hierarchical=*/false), 1, w));
  a.phases.push_back(phase_of("compressed",
                              hier ? "each momentum bucket reduced to the node leader, 8-bit alltoall and "
                                     "allgather among the leaders, broadcast in the node"
                                   : "each momentum bucket as 8-bit chunks: an alltoall, then an allgather",
                              low_precision_ledger(ctx, a.buckets, hier), w + 1));
  a.buffer_bytes = low_precision_workspace_bytes(a.buckets, hier ? ctx.world.nnodes : ctx.world.world_size);
  if (!a.buckets.flatten) a.transient_bytes = largest_bucket(a.buckets);
  if (!ctx.qadam_optimizer) {
    a.note = "needs optimizers: [{type: qadam}]; warm-up of " + std::to_string(w) + " steps (the default) assumed";
  }
  return a;
}

PlanAlgorithm plan_decentralized(const Context& ctx, const nlohmann::json& kw) {
  PlanAlgorithm a;
  const PlanWorld& world = ctx.world;
  const bool hier = kwarg_bool(kw, "hierarchical");
  const std::string mode = kw.value("peer_selection_mode", std::string("all"));
  const int64_t every = kw.value("communication_interval", int64_t{1});
  a.buckets = bucket_plan(ctx, 1, /*flatten=*/false, "weights");
  const int peers = hier ? world.nnodes : world.world_size;
  std::string what = mode == "all" ? "the weights averaged with every peer (an alltoall and an allgather)"
                                   : "the weights sent to one peer, who sends theirs";
  if (mode == "shift_one") {
    try {
      shift_one_peer(0, peers, 0);  // DecentralizedImpl's check: an even number of peers
    } catch (const InvalidArgument& e) {
      a.runnable = false;
      a.note = e.what();
      return a;
    }
    // Rank 0's peers in turn (they repeat every peers/2 communication steps).
    std::string seq;
    for (int64_t k = 0; k < std::min<int64_t>(peers / 2, 4); ++k) {
      seq += (k ? ", " : "") + std::to_string(shift_one_peer(0, peers, k) * (hier ? world.nproc_per_node : 1));
    }
    what += "; rank 0's peers in turn: " + seq + (peers / 2 > 4 ? ", ..." : "") + (hier ? " (node leaders)" : "");
  }
  if (hier) what += "; first the mean within the node to its leader, a broadcast in the node after";
  Ledger l;
  int64_t buffers = 0;
  for (const auto& b : a.buckets.buckets) {
    const int64_t e = element_bytes(b.dtype), numel = b.padded_numel;
    // The exchange among `m` peers (run_bucket's lambda).
    auto exchange = [&](int m, Where where, bool leaders_only) {
      if (mode == "all") {
        if (m <= 1) return;  // alone: the values are their own mean
        const int64_t per = (numel + m - 1) / m;
        l.add(Op::kAlltoall, m, m * per * e, where, leaders_only);
        l.add(Op::kAllgather, m, per * e, where, leaders_only);
      } else {
        l.add(Op::kSend, m, numel * e, where, leaders_only);
      }
    };
    if (!hier) {
      exchange(world.world_size, Where::kWholeGroup, false);
    } else {
      l.add(Op::kReduce, world.nproc_per_node, reduction_bytes(ctx, b.dtype, numel), Where::kWithinNode);
      exchange(world.nnodes, Where::kBetweenNodes, true);
      l.add(Op::kBroadcast, world.nproc_per_node, numel * e, Where::kWithinNode);
    }
    // AverageWorkspace (rank 0 is a peer) and shift_one's buffer for theirs.
    const int64_t ranks = mode == "all" ? std::max(1, peers) : 1;
    const int64_t per = (numel + ranks - 1) / ranks;
    buffers += ranks * per * e + (ranks > 1 ? ranks * per * e + per * e : 0);
    if (mode == "shift_one") buffers += numel * e;
  }
  a.phases.push_back(phase_of("communication steps", what, l, 1, std::nullopt, every));
  a.buffer_bytes = buffers;
  return a;
}

PlanAlgorithm plan_low_precision_decentralized(const Context& ctx, const nlohmann::json& kw) {
  PlanAlgorithm a;
  const PlanWorld& world = ctx.world;
  const bool hier = kwarg_bool(kw, "hierarchical");
  const int64_t every = kw.value("communication_interval", int64_t{1});
  a.buckets = bucket_plan(ctx, 1, /*flatten=*/false, "weights");
  Ledger l;
  int64_t buffers = 0;
  for (const auto& b : a.buckets.buckets) {
    const int64_t e = element_bytes(b.dtype), numel = b.padded_numel;
    const int64_t c = MinMaxUInt8::compressed_bytes(numel, 1);
    // ring_step(): the compressed difference to both ring neighbours.
    auto ring = [&](int m, Where where, bool leaders_only) {
      if (m <= 1) return;  // a ring of one is its own neighbour
      l.add(Op::kSend, m, c, where, leaders_only);
      l.add(Op::kSend, m, c, where, leaders_only);
    };
    if (!hier) {
      ring(world.world_size, Where::kWholeGroup, false);
    } else {
      l.add(Op::kReduce, world.nproc_per_node, reduction_bytes(ctx, b.dtype, numel), Where::kWithinNode);
      ring(world.nnodes, Where::kBetweenNodes, true);
      l.add(Op::kBroadcast, world.nproc_per_node, numel * e, Where::kWithinNode);
    }
    // State: w, left, right, x, diff, scratch; mine, from_left, from_right.
    buffers += 6 * numel * e + 3 * c;
  }
  a.phases.push_back(phase_of("communication steps",
                              std::string("the compressed weight difference (8 bits) to both ring neighbours") +
                                  (hier ? " (the ring of node leaders, after the mean within the node)" : ""),
                              l, 1, std::nullopt, every));
  a.buffer_bytes = buffers;
  return a;
}

PlanAlgorithm plan_async(const Context& ctx, const nlohmann::json& kw) {
  PlanAlgorithm a;
  const PlanWorld& world = ctx.world;
  const int64_t warmup = kw.value("warmup_steps", int64_t{0});
  const int64_t interval_ms = kw.value("sync_interval_ms", int64_t{500});
  // The warm-up is gradient allreduce over gradient buckets; then the
  // weights, in unflattened buckets of the same split.
  PlanBuckets gradients = bucket_plan(ctx, 1, ctx.recipe.algorithm.flatten, "gradients");
  a.buckets = bucket_plan(ctx, 1, /*flatten=*/false, warmup > 0 ? "gradients (warm-up), then weights" : "weights");
  if (warmup > 0) {
    a.phases.push_back(phase_of("warm-up", "an allreduce of each gradient bucket",
                                allreduce_ledger(ctx, gradients, false), 1, warmup));
  }
  a.phases.push_back(phase_of("asynchronous steps", "nothing: the averaging runs beside the steps", Ledger{},
                              warmup + 1));
  // AsyncImpl::loop(): a one-value float64 vote whether to go on, then an
  // allreduce of every weight bucket.
  Ledger round;
  round.add(Op::kAllreduce, world.world_size, 8, Where::kWholeGroup);
  int64_t weights = 0;
  for (const auto& b : a.buckets.buckets) {
    round.add(Op::kAllreduce, world.world_size, reduction_bytes(ctx, b.dtype, b.padded_numel), Where::kWholeGroup);
    weights += b.bytes;
  }
  PlanPhase r = phase_of("averaging round",
                         "a float64 vote whether to go on, then an allreduce (sum) of each weight bucket; one round "
                         "every " + std::to_string(interval_ms) + " ms at most",
                         round, warmup + 1);
  r.per_round = true;
  a.phases.push_back(r);
  a.rounds_per_second_at_most = 1000.0 / static_cast<double>(interval_ms);
  // A round holds a snapshot and a sum of every bucket, and one bucket's copy.
  a.transient_bytes = 2 * weights + largest_bucket(a.buckets);
  if (!gradients.flatten && warmup > 0) a.transient_bytes = std::max(a.transient_bytes, largest_bucket(gradients));
  return a;
}

PlanAlgorithm plan_algorithm(const Context& ctx, const std::string& name, const nlohmann::json& kwargs) {
  PlanAlgorithm a;
  if (name == "gradient_allreduce") a = plan_gradient_allreduce(ctx, kwargs);
  else if (name == "bytegrad") a = plan_bytegrad(ctx, kwargs);
  else if (name == "qadam") a = plan_qadam(ctx, kwargs);
  else if (name == "decentralized") a = plan_decentralized(ctx, kwargs);
  else if (name == "low_precision_decentralized") a = plan_low_precision_decentralized(ctx, kwargs);
  else if (name == "async") a = plan_async(ctx, kwargs);
  else {
    a.runnable = false;
    a.note = "bagua plan has no traffic model for this algorithm yet";
  }
  a.name = name;
  a.kwargs = kwargs;
  return a;
}

// The registry's defaults with `overrides` applied.
nlohmann::json with_defaults(const AlgorithmDescriptor& d, const nlohmann::json& overrides) {
  nlohmann::json kw = d.defaults;
  for (const auto& [k, v] : overrides.items()) {
    if (kw.contains(k)) kw[k] = v;
  }
  return kw;
}

// Every algorithm at its defaults, and the variants whose traffic differs
// in kind: the other setting of `hierarchical`, and decentralized's
// shift_one.
std::vector<nlohmann::json> variants_of(const AlgorithmDescriptor& d) {
  std::vector<nlohmann::json> out{with_defaults(d, nlohmann::json::object())};
  if (d.traits.supports_hierarchical && d.defaults.contains("hierarchical")) {
    out.push_back(with_defaults(d, {{"hierarchical", !d.defaults.at("hierarchical").get<bool>()}}));
  }
  if (d.defaults.contains("peer_selection_mode") && d.name == "decentralized") {
    const size_t n = out.size();
    for (size_t i = 0; i < n; ++i) {
      nlohmann::json kw = out[i];
      kw["peer_selection_mode"] = "shift_one";
      out.push_back(kw);
    }
  }
  return out;
}

// ---------------------------------------------------------------- memory

// Optimizer state per parameter of each type, in parameter-sized tensors
// (LibTorch 1.13's optimizers and QAdamOptimizer).
std::pair<int64_t, std::string> optimizer_state(const OptimizerSpec& s) {
  switch (s.type) {
    case OptimizerType::kSgd:
      return s.momentum != 0 ? std::make_pair(int64_t{1}, std::string("momentum buffer"))
                             : std::make_pair(int64_t{0}, std::string("nothing (no momentum)"));
    case OptimizerType::kAdam:
    case OptimizerType::kAdamW:
      return s.amsgrad ? std::make_pair(int64_t{3}, std::string("exp_avg, exp_avg_sq, max_exp_avg_sq"))
                       : std::make_pair(int64_t{2}, std::string("exp_avg, exp_avg_sq"));
    case OptimizerType::kRmsprop: {
      int64_t k = 1;
      std::string what = "square_avg";
      if (s.momentum > 0) {
        ++k;
        what += ", momentum buffer";
      }
      if (s.centered) {
        ++k;
        what += ", grad_avg";
      }
      return {k, what};
    }
    case OptimizerType::kAdagrad: return {1, "sum"};
    case OptimizerType::kQAdam: return {3, "exp_avg, exp_avg_sq, the update's denominator"};
  }
  return {0, ""};
}

// ---------------------------------------------------------------- helpers

std::string resolve_backend(const Recipe& recipe, const PlanOptions& options, std::string* device) {
  const bool cpu = recipe.train.device == Device::kCpu;
  const int gpus = cpu ? 0 : static_cast<int>(torch::cuda::device_count());
  // Trainer: train.device auto is a GPU when one is visible.
  const bool on_gpu = !cpu && (recipe.train.device == Device::kCuda || gpus > 0);
  *device = on_gpu ? "cuda" : "cpu";
  if (!options.backend.empty()) return options.backend;
  if (recipe.distributed.backend != Backend::kAuto) return to_string(recipe.distributed.backend);
  // init_process_group's auto: NCCL when every local rank has a GPU of its own.
  return on_gpu && gpus >= recipe.distributed.nproc_per_node ? "nccl" : "gloo";
}

PlanTensor tensor_of(const std::string& name, const at::Tensor& t) {
  PlanTensor p;
  p.name = name;
  p.shape = t.sizes().vec();
  p.dtype = t.scalar_type();
  p.numel = t.numel();
  p.bytes = static_cast<int64_t>(t.nbytes());
  p.trainable = t.requires_grad();
  return p;
}

}  // namespace

// ---------------------------------------------------------------- PlanAlgorithm

std::string plan_dtype_name(c10::ScalarType dtype) { return comm::dtype_name(dtype); }

int64_t PlanAlgorithm::bytes_sent(int64_t first, int64_t last) const {
  int64_t total = 0;
  for (const auto& p : phases) {
    if (p.per_round) continue;
    const int64_t lo = std::max(first, p.first_step);
    const int64_t hi = p.last_step ? std::min(last, *p.last_step) : last;
    if (hi < lo) continue;
    // Steps p.first_step + j * every within [lo, hi].
    const int64_t start = p.first_step + (lo - p.first_step + p.every - 1) / p.every * p.every;
    if (start > hi) continue;
    total += ((hi - start) / p.every + 1) * p.leader.total();
  }
  return total;
}

double PlanAlgorithm::steady_bytes_per_step() const {
  for (auto it = phases.rbegin(); it != phases.rend(); ++it) {
    if (!it->per_round) return static_cast<double>(it->leader.total()) / static_cast<double>(it->every);
  }
  return 0;
}

// ---------------------------------------------------------------- make_plan

Plan make_plan(const Recipe& recipe, const PlanOptions& options) {
  Plan plan;
  plan.recipe_name = recipe.name;
  plan.recipe_source = recipe.source;

  // The world, as the launcher numbers it: node i holds ranks i L .. i L + L - 1.
  PlanWorld& world = plan.world;
  world.nnodes = recipe.distributed.nnodes;
  world.nproc_per_node = recipe.distributed.nproc_per_node;
  world.world_size = world.nnodes * world.nproc_per_node;
  for (int node = 0; node < world.nnodes; ++node) world.node_leaders.push_back(node * world.nproc_per_node);
  world.backend = resolve_backend(recipe, options, &world.device);

  // What bagua run would refuse is worth saying, not failing on: a plan may
  // be made on a machine other than the one that will run it.
  try {
    check_supported(recipe);
  } catch (const Error& e) {
    plan.notes.push_back(std::string("bagua run would refuse this recipe here: ") + e.what());
  }

  // The model, only for its parameter and buffer list.
  torch::jit::Module module;
  try {
    module = torch::jit::load(recipe.model.torchscript, at::kCPU);
  } catch (const c10::Error& e) {
    throw Error("model.torchscript: cannot load " + recipe.model.torchscript + " as TorchScript: " +
                    e.what_without_backtrace(),
                true);
  }
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& p : module.named_parameters(true)) named.emplace_back(p.name, p.value);
  PlanParameters& params = plan.parameters;
  for (const auto& [name, t] : named) params.parameters.push_back(tensor_of(name, t));
  for (const auto& b : module.named_buffers(true)) {
    params.buffers.push_back(tensor_of(b.name, b.value));
    params.buffer_bytes += params.buffers.back().bytes;
  }

  // model.ignore_params, checked as with_bagua checks it.
  for (const auto& pattern : recipe.model.ignore_params) {
    bool any = false;
    for (auto& p : params.parameters) {
      if (glob_match(pattern, p.name)) p.ignored = any = true;
    }
    if (!any) {
      throw Error("model.ignore_params: '" + pattern + "' matches no parameter of " + recipe.model.torchscript +
                      " (bagua run would stop at the same point)",
                  true);
    }
  }

  // Which optimizer takes each parameter: the trainer's own assignment, run
  // over empty stand-ins so that nothing of the model's size is allocated.
  {
    std::vector<std::pair<std::string, at::Tensor>> stand_ins;
    std::map<const void*, size_t> index_of;
    for (size_t i = 0; i < named.size(); ++i) {
      at::Tensor s = at::empty({0});
      s.requires_grad_(named[i].second.requires_grad());
      index_of[s.unsafeGetTensorImpl()] = i;
      stand_ins.emplace_back(named[i].first, s);
    }
    train::BuiltOptimizers built = train::build_optimizers(recipe.optimizers, stand_ins);
    for (size_t o = 0; o < built.optimizers.size(); ++o) {
      for (const auto& group : built.optimizers[o]->param_groups()) {
        for (const auto& s : group.params()) params.parameters[index_of.at(s.unsafeGetTensorImpl())].optimizer = static_cast<int>(o);
      }
    }
  }

  // Totals and dtypes.
  std::map<c10::ScalarType, PlanDtype> dtypes;
  for (const auto& p : params.parameters) {
    params.numel += p.numel;
    params.bytes += p.bytes;
    if (p.trainable) {
      params.trainable_numel += p.numel;
      params.trainable_bytes += p.bytes;
      if (!p.ignored) {
        params.communicated_numel += p.numel;
        params.communicated_bytes += p.bytes;
      }
    }
    PlanDtype& d = dtypes[p.dtype];
    d.dtype = p.dtype;
    d.tensors += 1;
    d.numel += p.numel;
    d.bytes += p.bytes;
  }
  for (const auto& [t, d] : dtypes) params.dtypes.push_back(d);

  // The tensors BaguaModule registers (AlgorithmImpl::init_tensors and
  // weight_tensors: the build parameters, last first).
  Context ctx{recipe, world, {}};
  for (auto it = params.parameters.rbegin(); it != params.parameters.rend(); ++it) {
    if (!it->trainable || it->ignored) continue;
    BaguaTensor t;
    t.name = it->name;
    t.dtype = it->dtype;
    t.shape = it->shape;
    ctx.tensors.push_back(std::move(t));
  }
  if (recipe.optimizers.size() == 1 && recipe.optimizers[0].type == OptimizerType::kQAdam) {
    ctx.qadam_optimizer = true;
    ctx.qadam_warmup = recipe.optimizers[0].warmup_steps;
  }

  // The recipe's algorithm, then every algorithm of the registry.
  plan.algorithm = plan_algorithm(ctx, recipe.algorithm.name, recipe.algorithm.kwargs);
  plan.algorithm.is_recipe = true;
  plan.alternatives.push_back(plan.algorithm);
  for (const auto& d : algorithm_registry()) {
    if (!d.implemented()) continue;
    for (const auto& kw : variants_of(d)) {
      if (d.name == recipe.algorithm.name && kw == recipe.algorithm.kwargs) continue;  // listed first
      plan.alternatives.push_back(plan_algorithm(ctx, d.name, kw));
    }
  }

  // Memory per worker (rank 0: a node leader, which holds the most).
  PlanMemory& mem = plan.memory;
  mem.parameters = params.bytes;
  mem.buffers = params.buffer_bytes;
  const PlanAlgorithm& a = plan.algorithm;
  // Flattened gradient buckets hold the gradients, padding included.
  const bool gradient_buckets = a.buckets.flatten && a.buckets.registers.rfind("gradients", 0) == 0;
  mem.gradients = params.trainable_bytes + (gradient_buckets ? a.buckets.padding_bytes : 0);
  for (size_t o = 0; o < recipe.optimizers.size(); ++o) {
    int64_t assigned = 0;
    for (const auto& p : params.parameters) {
      if (p.optimizer == static_cast<int>(o)) assigned += p.bytes;
    }
    auto [copies, what] = optimizer_state(recipe.optimizers[o]);
    mem.optimizer_state += copies * assigned;
    mem.optimizer_notes.push_back("optimizers[" + std::to_string(o) + "] " + to_string(recipe.optimizers[o].type) +
                                  ": " + what + " (" + std::to_string(copies) + " x " + std::to_string(assigned) +
                                  " B of parameters)");
  }
  mem.algorithm_buffers = a.buffer_bytes;
  mem.transient = a.transient_bytes;

  // Data and steps, as the trainer computes them (Worker::plan()).
  PlanSteps& steps = plan.steps;
  steps.batch_size = recipe.data.batch_size;
  steps.epochs = recipe.train.epochs;
  steps.max_steps = recipe.train.max_steps;
  steps.drop_last = recipe.data.sampler.drop_last;
  if (options.load_data) {
    auto train = load_dataset(recipe.data.train, target_kind_for(recipe.model.loss), load_options_for(recipe.data));
    plan.train_data = train->describe();
    mem.data = train->memory_bytes();
    if (recipe.data.eval) {
      auto eval = load_dataset(*recipe.data.eval, target_kind_for(recipe.model.loss));
      plan.eval_data = eval->describe();
      steps.eval_samples = eval->size();
      mem.data += eval->memory_bytes();
    }
    auto sampler = make_sampler(recipe.data, *train, world.world_size);
    steps.known = true;
    steps.train_samples = train->size();
    steps.samples_per_worker = sampler->samples_per_rank(0);
    steps.per_epoch = sampler->num_batches(0);
    if (recipe.data.sampler.batch_complexity) {
      // Variable-size batches: the first epoch's, as the trainer counts them.
      auto first = sampler->batches(0, 0);
      steps.last_batch = first.empty() ? 0 : static_cast<int64_t>(first.back().size());
      steps.total = 0;
      for (int64_t e = 0; e < steps.epochs; ++e) steps.total += sampler->num_batches(e);
      plan.notes.push_back("variable-size batches (data.sampler.batch_complexity): per_epoch and batch sizes are "
                           "the first epoch's; other epochs differ");
    } else {
      steps.last_batch = steps.per_epoch == 0 ? 0 : steps.samples_per_worker - (steps.per_epoch - 1) * steps.batch_size;
      steps.total = steps.per_epoch * steps.epochs;
    }
    if (steps.max_steps) steps.total = std::min(steps.total, *steps.max_steps);
    if (steps.per_epoch == 0) {
      plan.notes.push_back("the training set gives each worker no samples: bagua run would stop before the first step");
    }
  }
  return plan;
}

// ---------------------------------------------------------------- JSON

namespace {

nlohmann::json traffic_json(const PlanTraffic& t) {
  return {{"total", t.total()}, {"whole_group", t.whole_group}, {"within_node", t.within_node},
          {"between_nodes", t.between_nodes}};
}

nlohmann::json tensor_json(const PlanTensor& t) {
  nlohmann::json j = {{"name", t.name},           {"shape", t.shape},         {"dtype", plan_dtype_name(t.dtype)},
                      {"numel", t.numel},         {"bytes", t.bytes},         {"trainable", t.trainable},
                      {"ignored", t.ignored}};
  j["optimizer"] = t.optimizer >= 0 ? nlohmann::json(t.optimizer) : nlohmann::json();
  return j;
}

nlohmann::json buckets_json(const PlanBuckets& b) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& k : b.buckets) {
    list.push_back({{"name", k.name},
                    {"dtype", plan_dtype_name(k.dtype)},
                    {"tensors", k.tensors},
                    {"numel", k.numel},
                    {"padded_numel", k.padded_numel},
                    {"bytes", k.bytes},
                    {"padding_bytes", k.padding_bytes}});
  }
  return {{"registers", b.registers}, {"flatten", b.flatten},       {"bucket_size", b.bucket_bytes}, {"bucket_size_auto", b.bucket_size_auto},
          {"alignment", b.alignment}, {"count", b.buckets.size()}, {"bytes", b.bytes},
          {"padding_bytes", b.padding_bytes}, {"list", list}};
}

nlohmann::json algorithm_json(const Plan& plan, const PlanAlgorithm& a) {
  nlohmann::json phases = nlohmann::json::array();
  for (const auto& p : a.phases) {
    nlohmann::json j = {{"name", p.name}, {"what", p.what}, {"per_round", p.per_round}};
    if (!p.per_round) {
      j["first_step"] = p.first_step;
      j["last_step"] = p.last_step ? nlohmann::json(*p.last_step) : nlohmann::json();
      j["every"] = p.every;
    }
    j["sent"] = {{"node_leader", traffic_json(p.leader)}, {"other_worker", traffic_json(p.other)}};
    // Every collective is symmetric as the counter counts it.
    j["received"] = j["sent"];
    phases.push_back(j);
  }
  nlohmann::json j = {{"name", a.name},         {"kwargs", a.kwargs},     {"is_recipe", a.is_recipe},
                      {"runnable", a.runnable}, {"note", a.note},         {"phases", phases},
                      {"buffer_bytes", a.buffer_bytes}, {"transient_bytes", a.transient_bytes}};
  if (a.runnable) {
    j["buckets"] = buckets_json(a.buckets);
    j["steady_bytes_per_step"] = a.steady_bytes_per_step();
    j["run_bytes"] = plan.steps.known ? nlohmann::json(a.bytes_sent(1, plan.steps.total)) : nlohmann::json();
  }
  if (a.rounds_per_second_at_most) {
    j["rounds_per_second_at_most"] = *a.rounds_per_second_at_most;
    // Per second is not predictable: a round waits sync_interval_ms, then
    // takes as long as its collectives and the wait for the weights.
    j["bytes_per_second"] = nullptr;
  }
  return j;
}

}  // namespace

nlohmann::json plan_to_json(const Plan& plan) {
  const PlanParameters& p = plan.parameters;
  nlohmann::json params = nlohmann::json::array(), buffers = nlohmann::json::array(),
                 dtypes = nlohmann::json::array(), ignored = nlohmann::json::array();
  for (const auto& t : p.parameters) {
    params.push_back(tensor_json(t));
    if (t.ignored) ignored.push_back({{"name", t.name}, {"numel", t.numel}, {"bytes", t.bytes}});
  }
  for (const auto& t : p.buffers) buffers.push_back(tensor_json(t));
  for (const auto& d : p.dtypes) {
    dtypes.push_back({{"dtype", plan_dtype_name(d.dtype)}, {"tensors", d.tensors}, {"numel", d.numel}, {"bytes", d.bytes}});
  }
  nlohmann::json alternatives = nlohmann::json::array();
  for (const auto& a : plan.alternatives) alternatives.push_back(algorithm_json(plan, a));
  const PlanMemory& m = plan.memory;
  const PlanSteps& s = plan.steps;
  nlohmann::json steps = {{"known", s.known},
                          {"train_samples", s.train_samples},
                          {"eval_samples", s.eval_samples},
                          {"samples_per_worker", s.samples_per_worker},
                          {"batch_size", s.batch_size},
                          {"last_batch", s.last_batch},
                          {"per_epoch", s.per_epoch},
                          {"epochs", s.epochs},
                          {"total", s.total},
                          {"drop_last", s.drop_last}};
  steps["max_steps"] = s.max_steps ? nlohmann::json(*s.max_steps) : nlohmann::json();
  return {
      {"recipe", {{"name", plan.recipe_name}, {"source", plan.recipe_source}}},
      {"world",
       {{"nnodes", plan.world.nnodes},
        {"nproc_per_node", plan.world.nproc_per_node},
        {"world_size", plan.world.world_size},
        {"node_leaders", plan.world.node_leaders},
        {"backend", plan.world.backend},
        {"device", plan.world.device}}},
      {"parameters",
       {{"count", p.parameters.size()},
        {"numel", p.numel},
        {"bytes", p.bytes},
        {"trainable_numel", p.trainable_numel},
        {"trainable_bytes", p.trainable_bytes},
        {"communicated_numel", p.communicated_numel},
        {"communicated_bytes", p.communicated_bytes},
        {"dtypes", dtypes},
        {"ignored", ignored},
        {"list", params},
        {"buffers", {{"count", p.buffers.size()}, {"bytes", p.buffer_bytes}, {"list", buffers}}}}},
      {"buckets", buckets_json(plan.algorithm.buckets)},
      {"algorithm", algorithm_json(plan, plan.algorithm)},
      {"algorithms", alternatives},
      {"memory",
       {{"parameters", m.parameters},
        {"buffers", m.buffers},
        {"gradients", m.gradients},
        {"optimizer_state", m.optimizer_state},
        {"algorithm_buffers", m.algorithm_buffers},
        {"transient", m.transient},
        {"data", m.data},
        {"total", m.total()},
        {"optimizers", m.optimizer_notes},
        {"excludes", "activations, autograd's saved tensors, LibTorch and the process itself"}}},
      {"steps", steps},
      {"data", {{"train", plan.train_data}, {"eval", plan.eval_data}}},
      {"notes", plan.notes},
  };
}

}  // namespace bagua
