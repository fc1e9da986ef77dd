// What an algorithm sends and holds, predicted without running it: the
// types of an algorithm's traffic model (AlgorithmDescriptor::traffic,
// bagua/algorithms/catalog.h), which `bagua plan` (bagua/plan.h) asks for
// every algorithm. Plain values, no LibTorch: a tensor's type is its dtype
// name ("float32") and element size.
//
// Bytes are counted as ProcessGroup::bytes_sent() counts them, and split by
// where they go: `whole_group` (a collective over every worker: within the
// node on one node, across nodes otherwise), `within_node` (a hierarchical
// algorithm's reduce and broadcast inside a node) and `between_nodes`
// (among the node leaders only). Rank 0 is always a node leader; `other`
// is a worker that is not (equal to `leader` when the algorithm is not
// hierarchical).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace bagua {

struct PlanWorld {
  int nnodes = 1;
  int nproc_per_node = 1;
  int world_size = 1;
  std::vector<int> node_leaders;  // global ranks: 0, nproc_per_node, 2 nproc_per_node, ...
  std::string backend;            // "gloo" or "nccl"
  std::string device;             // "cpu" or "cuda"
};

struct PlanBucket {
  std::string name;  // bucket0, bucket1, ... as BaguaModule names them
  std::string dtype = "float32";     // as the plan's JSON writes dtypes
  int64_t element_bytes = 4;
  std::vector<std::string> tensors;  // registration order
  int64_t numel = 0;                 // elements of its tensors
  int64_t padded_numel = 0;          // with the algorithm's padding
  int64_t bytes = 0;                 // padded_numel x element size
  int64_t padding_bytes = 0;
};

struct PlanBuckets {
  std::string registers;  // "gradients", "weights", "gradients, then momentum", ...
  bool flatten = true;    // one buffer per bucket (algorithms that send weights never flatten)
  int64_t bucket_bytes = 0;
  bool bucket_size_auto = false;  // bucket_size: auto: planned at the size tuning starts from
  int64_t alignment = 1;  // padded to a multiple of this many elements
  std::vector<PlanBucket> buckets;
  int64_t bytes = 0, padding_bytes = 0;
};

// Bytes one worker sends in one step (or round) of a phase, by where they go.
struct PlanTraffic {
  int64_t whole_group = 0;
  int64_t within_node = 0;
  int64_t between_nodes = 0;
  int64_t total() const { return whole_group + within_node + between_nodes; }
};

struct PlanPhase {
  std::string name;  // "every step", "warm-up", "compressed", "communication steps", "averaging round"
  std::string what;  // one line: what goes out
  // Async's averaging rounds: the figures are per round, not per step, and
  // the steps below do not apply.
  bool per_round = false;
  int64_t first_step = 1;            // 1-based
  std::optional<int64_t> last_step;  // inclusive; empty: to the end of the run
  int64_t every = 1;                 // sends at first_step, first_step + every, ...
  PlanTraffic leader;                // rank 0 and every node leader
  PlanTraffic other;                 // a worker that is not a node leader
};

struct PlanAlgorithm {
  std::string name;
  nlohmann::json kwargs;  // complete (defaults filled)
  bool is_recipe = false; // the recipe's own algorithm (and kwargs)
  // False when this world cannot run it (shift_one with an odd number of
  // peers); `note` says why and the figures are empty.
  bool runnable = true;
  std::string note;
  PlanBuckets buckets;
  std::vector<PlanPhase> phases;
  // Buffers the algorithm keeps per worker beyond the gradients (its
  // compressed or peer buffers), and the most it allocates for a step.
  int64_t buffer_bytes = 0;
  int64_t transient_bytes = 0;
  // Async: at most this many averaging rounds per second (one per
  // sync_interval_ms; fewer when a round takes longer).
  std::optional<double> rounds_per_second_at_most;

  // Rank 0's bytes over steps [first, last] (1-based, inclusive), phases
  // applied; async rounds are not steps and are left out.
  int64_t bytes_sent(int64_t first, int64_t last) const;
  // Rank 0's bytes per step once warm-ups are over, averaged over the
  // communication interval; async: 0 (see its round).
  double steady_bytes_per_step() const;
};

// What a traffic model reads: the world, the recipe's bucket settings, and
// the buckets BaguaModule would build from the registered tensors.
struct TrafficContext {
  PlanWorld world;
  bool flatten = true;            // algorithm.flatten
  int64_t bucket_bytes = 0;       // algorithm.bucket_size
  bool bucket_size_auto = false;  // algorithm.bucket_size: auto
  // The recipe's optimizer type when it has exactly one ("sgd", ...), else
  // empty: an algorithm with a required optimizer
  // (AlgorithmTraits::required_optimizer) is given it when they are equal.
  std::string sole_optimizer;
  // Its warm-up steps (OptimizerSpec::warmup_steps) when an algorithm
  // requires its type; otherwise the default.
  int64_t optimizer_warmup = 100;
  // The buckets make_buckets() makes of the registered tensors (the build
  // parameters, last first) with `alignment` (elements) and `flatten`;
  // `registers` says what they hold ("gradients", "weights", ...).
  std::function<PlanBuckets(int64_t alignment, bool flatten, const std::string& registers)> buckets;
};

// One algorithm's traffic model: its PlanAlgorithm for complete kwargs with
// "auto" decided (resolve_kwargs(); name and kwargs are filled in by the
// caller).
using TrafficModel = std::function<PlanAlgorithm(const TrafficContext& ctx, const nlohmann::json& kwargs)>;

}  // namespace bagua
