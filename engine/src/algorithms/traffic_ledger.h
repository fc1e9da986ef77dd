// What the algorithms' traffic models (NAME_descriptor.cpp) share: the
// collectives counted as ProcessGroup::bytes_sent() counts them
// (engine/src/comm/collectives.cpp: a share of the payload per call,
// rounded to the nearest byte per call), a ledger of one step's calls for a
// node leader and for the others, and the exchanges several algorithms
// issue alike. Keep them in step with the collectives' counter (test_plan
// holds the predictions against real runs of every algorithm).
#pragma once

#include <bagua/algorithms/traffic.h>

#include <cstdint>
#include <optional>
#include <string>

namespace bagua::traffic {

enum class Op { kAllreduce, kReduce, kBroadcast, kAlltoall, kAllgather, kSend };
enum class Where { kWholeGroup, kWithinNode, kBetweenNodes };

// Bytes one call of `op` over a group of `group_size` counts for a payload
// of `bytes`.
int64_t counted(Op op, int group_size, int64_t bytes);

// The calls of one step (or round), for a node leader and for the others.
struct Ledger {
  PlanTraffic leader, other;
  // `leaders_only`: issued by the node leaders alone (a hierarchical
  // algorithm's exchange among them).
  void add(Op op, int group_size, int64_t bytes, Where where, bool leaders_only = false);
};

// Bytes of a reduction's wire tensor (allreduce, reduce): Gloo has no
// float16/bfloat16 reductions, so they travel as float32 there
// (comm/reduction.cpp); every other dtype as it is.
int64_t reduction_bytes(const PlanWorld& world, const PlanBucket& bucket, int64_t numel);

int64_t largest_bucket(const PlanBuckets& buckets);

PlanPhase phase_of(std::string name, std::string what, const Ledger& l, int64_t first = 1,
                   std::optional<int64_t> last = std::nullopt, int64_t every = 1);

// A full-precision allreduce of every bucket, flat or hierarchical
// (GradientAllReduce's run_bucket; QAdam's and async's warm-ups, flat).
Ledger allreduce_ledger(const PlanWorld& world, const PlanBuckets& buckets, bool hierarchical);

// algorithms::compressed_allreduce() over a group of m on `numel` values:
// an alltoall of m compressed chunks, an allgather of one.
void add_compressed_allreduce(Ledger& l, int64_t numel, int m, Where where, bool leaders_only);

// algorithms::centralized_low_precision() on every bucket (ByteGrad; QAdam
// after its warm-up).
Ledger low_precision_ledger(const PlanWorld& world, const PlanBuckets& buckets, bool hierarchical);

// LowPrecisionWorkspace of every bucket, on the ranks that run the
// compressed exchange (all, or the node leaders), over a group of m.
int64_t low_precision_workspace_bytes(const PlanBuckets& buckets, int m);

}  // namespace bagua::traffic
