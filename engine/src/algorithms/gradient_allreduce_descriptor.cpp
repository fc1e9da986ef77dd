// gradient_allreduce as the rest of bagua sees it (bagua/algorithms/catalog.h);
// the algorithm itself is gradient_allreduce.cpp.
#include "algorithms/descriptors.h"
#include "algorithms/traffic_ledger.h"

namespace bagua::algorithms {

AlgorithmDescriptor gradient_allreduce_descriptor() {
  AlgorithmDescriptor d;
  d.name = "gradient_allreduce";
  d.description = "centralized, synchronous, full precision: allreduce of gradient buckets during backward";
  d.defaults = {{"hierarchical", false}, {"average", true}};
  d.traits.supports_hierarchical = true;
  d.plan_variants = {{{"hierarchical", true}}};
  d.traffic = [](const TrafficContext& ctx, const nlohmann::json& kw) {
    PlanAlgorithm a;
    const bool hier = kw.value("hierarchical", false);
    a.buckets = ctx.buckets(1, ctx.flatten, "gradients");
    a.phases.push_back(traffic::phase_of(
        "every step",
        hier ? "each gradient bucket reduced to the node leader, allreduced among the leaders, broadcast in the node"
             : "an allreduce of each gradient bucket",
        traffic::allreduce_ledger(ctx.world, a.buckets, hier)));
    if (!a.buckets.flatten) a.buffer_bytes = traffic::largest_bucket(a.buckets);  // Bucket::flat()'s shared copy
    return a;
  };
  return d;
}

}  // namespace bagua::algorithms
