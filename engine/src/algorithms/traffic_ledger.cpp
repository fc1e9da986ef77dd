#include "algorithms/traffic_ledger.h"

#include "common/minmax_layout.h"

#include <algorithm>
#include <utility>

namespace bagua {

namespace traffic {

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

void Ledger::add(Op op, int group_size, int64_t bytes, Where where, bool leaders_only) {
  const int64_t n = counted(op, group_size, bytes);
  for (PlanTraffic* t : {&leader, &other}) {
    if (leaders_only && t == &other) continue;
    (where == Where::kWholeGroup ? t->whole_group : where == Where::kWithinNode ? t->within_node
                                                                                 : t->between_nodes) += n;
  }
}

int64_t reduction_bytes(const PlanWorld& world, const PlanBucket& bucket, int64_t numel) {
  const bool widened = world.backend == "gloo" && (bucket.dtype == "float16" || bucket.dtype == "bfloat16");
  return numel * (widened ? 4 : bucket.element_bytes);
}

int64_t largest_bucket(const PlanBuckets& buckets) {
  int64_t m = 0;
  for (const auto& b : buckets.buckets) m = std::max(m, b.bytes);
  return m;
}

PlanPhase phase_of(std::string name, std::string what, const Ledger& l, int64_t first, std::optional<int64_t> last,
                   int64_t every) {
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

Ledger allreduce_ledger(const PlanWorld& w, const PlanBuckets& buckets, bool hierarchical) {
  Ledger l;
  for (const auto& b : buckets.buckets) {
    const int64_t wire = reduction_bytes(w, b, b.padded_numel);
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

void add_compressed_allreduce(Ledger& l, int64_t numel, int m, Where where, bool leaders_only) {
  const int64_t stride = minmax_layout::chunk_stride(numel, m);
  l.add(Op::kAlltoall, m, m * stride, where, leaders_only);
  l.add(Op::kAllgather, m, stride, where, leaders_only);
}

Ledger low_precision_ledger(const PlanWorld& w, const PlanBuckets& buckets, bool hierarchical) {
  Ledger l;
  for (const auto& b : buckets.buckets) {
    if (!hierarchical) {
      add_compressed_allreduce(l, b.padded_numel, w.world_size, Where::kWholeGroup, false);
    } else {
      l.add(Op::kReduce, w.nproc_per_node, reduction_bytes(w, b, b.padded_numel), Where::kWithinNode);
      add_compressed_allreduce(l, b.padded_numel, w.nnodes, Where::kBetweenNodes, true);
      l.add(Op::kBroadcast, w.nproc_per_node, b.bytes, Where::kWithinNode);
    }
  }
  return l;
}

int64_t low_precision_workspace_bytes(const PlanBuckets& buckets, int m) {
  int64_t total = 0;
  for (const auto& b : buckets.buckets) {
    const int64_t stride = minmax_layout::chunk_stride(b.padded_numel, m);
    const int64_t per = minmax_layout::chunk_numel(b.padded_numel, m);
    total += 4 * m * stride;           // packed, received, gathered; this rank's share compressed, m times
    total += per * 4;                  // the share, float32 (decompress_sum adds the chunks in one pass)
    if (b.dtype != "float32") total += b.padded_numel * 4;  // a float32 result to copy back
  }
  return total;
}

}  // namespace traffic

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

}  // namespace bagua
