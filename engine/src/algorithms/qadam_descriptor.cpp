// qadam as the rest of bagua sees it (bagua/algorithms/catalog.h); the
// algorithm and its optimizer are q_adam.cpp.
#include "algorithms/descriptors.h"
#include "algorithms/traffic_ledger.h"

#include <string>

namespace bagua::algorithms {

AlgorithmDescriptor qadam_descriptor() {
  AlgorithmDescriptor d;
  d.name = "qadam";
  d.description = "centralized, synchronous, 8-bit: Adam whose momentum is averaged compressed after a warm-up";
  d.defaults = {{"hierarchical", "auto"}};
  d.traits.required_optimizer = "qadam";
  d.optimizer.only_with_its_algorithm_because = "which communicates its compressed momentum";
  d.optimizer.not_fused_because = "the qadam algorithm reads and compresses its momentum parameter by parameter";
  d.optimizer.state_tensors = 3;
  d.optimizer.state = "exp_avg, exp_avg_sq, the update's denominator";
  // QAdam freezes its second moment after its warm-up: estimated over a
  // handful of steps it holds near-zeros that blow compressed momentum up.
  d.optimizer.bench_warmup_at_least = 20;
  d.optimizer.stand_in = "adam";
  d.traits.supports_hierarchical = true;
  d.plan_variants = {{{"hierarchical", true}}, {{"hierarchical", false}}};
  d.traffic = [](const TrafficContext& ctx, const nlohmann::json& kw) {
    PlanAlgorithm a;
    const bool hier = kw.value("hierarchical", false);
    const int64_t w = ctx.optimizer_warmup;
    // QAdamImpl pads like ByteGrad in both phases; the momentum buckets have
    // the gradients' shapes, so they split the same way.
    a.buckets = ctx.buckets(ctx.world.world_size, ctx.flatten, "gradients, then momentum");
    a.phases.push_back(traffic::phase_of("warm-up", "an allreduce of each gradient bucket (exact Adam)",
                                         traffic::allreduce_ledger(ctx.world, a.buckets, /*hierarchical=*/false), 1,
                                         w));
    a.phases.push_back(traffic::phase_of(
        "compressed",
        hier ? "each momentum bucket reduced to the node leader, 8-bit alltoall and allgather among the leaders, "
               "broadcast in the node"
             : "each momentum bucket as 8-bit chunks: an alltoall, then an allgather",
        traffic::low_precision_ledger(ctx.world, a.buckets, hier), w + 1));
    a.buffer_bytes =
        traffic::low_precision_workspace_bytes(a.buckets, hier ? ctx.world.nnodes : ctx.world.world_size);
    if (!a.buckets.flatten) a.buffer_bytes += traffic::largest_bucket(a.buckets);  // Bucket::flat()'s shared copy
    if (ctx.sole_optimizer != "qadam") {
      a.note = "needs optimizers: [{type: qadam}]; warm-up of " + std::to_string(w) + " steps (the default) assumed";
    }
    return a;
  };
  return d;
}

}  // namespace bagua::algorithms
