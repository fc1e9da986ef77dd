// async as the rest of bagua sees it (bagua/algorithms/catalog.h); the
// algorithm itself is async_model_average.cpp.
#include "algorithms/descriptors.h"
#include "algorithms/traffic_ledger.h"

#include <algorithm>
#include <string>

namespace bagua::algorithms {

AlgorithmDescriptor async_descriptor() {
  using traffic::Op;
  using traffic::Where;
  AlgorithmDescriptor d;
  d.name = "async";
  d.description = "asynchronous model averaging in the background, with abort and resume";
  d.defaults = {{"peer_selection_mode", "all"}, {"sync_interval_ms", 500}, {"warmup_steps", 0}};
  d.traits.replicas_identical = false;
  d.traits.synchronous = false;
  d.traits.keeps_bucket_state = true;
  d.traffic = [](const TrafficContext& ctx, const nlohmann::json& kw) {
    PlanAlgorithm a;
    const PlanWorld& world = ctx.world;
    const int64_t warmup = kw.value("warmup_steps", int64_t{0});
    const int64_t interval_ms = kw.value("sync_interval_ms", int64_t{500});
    // The warm-up is gradient allreduce over gradient buckets; then the
    // weights, in unflattened buckets of the same split.
    PlanBuckets gradients = ctx.buckets(1, ctx.flatten, "gradients");
    a.buckets = ctx.buckets(1, /*flatten=*/false, warmup > 0 ? "gradients (warm-up), then weights" : "weights");
    if (warmup > 0) {
      a.phases.push_back(traffic::phase_of("warm-up", "an allreduce of each gradient bucket",
                                           traffic::allreduce_ledger(world, gradients, false), 1, warmup));
    }
    a.phases.push_back(traffic::phase_of("asynchronous steps", "nothing: the averaging runs beside the steps",
                                         traffic::Ledger{}, warmup + 1));
    // AsyncImpl::loop(): a one-value float64 vote whether to go on, then an
    // allreduce of every weight bucket.
    traffic::Ledger round;
    round.add(Op::kAllreduce, world.world_size, 8, Where::kWholeGroup);
    int64_t weights = 0;
    for (const auto& b : a.buckets.buckets) {
      round.add(Op::kAllreduce, world.world_size, traffic::reduction_bytes(world, b, b.padded_numel),
                Where::kWholeGroup);
      weights += b.bytes;
    }
    PlanPhase r = traffic::phase_of("averaging round",
                                    "a float64 vote whether to go on, then an allreduce (sum) of each weight bucket; "
                                    "one round every " + std::to_string(interval_ms) + " ms at most",
                                    round, warmup + 1);
    r.per_round = true;
    a.phases.push_back(r);
    a.rounds_per_second_at_most = 1000.0 / static_cast<double>(interval_ms);
    // A round's snapshot, sum and updated copy of every bucket, allocated
    // once; the warm-up's unflattened gradient buckets share one flat copy.
    a.buffer_bytes = 3 * weights;
    if (!gradients.flatten && warmup > 0) a.buffer_bytes += traffic::largest_bucket(gradients);
    return a;
  };
  return d;
}

}  // namespace bagua::algorithms
