// bytegrad as the rest of bagua sees it (bagua/algorithms/catalog.h); the
// algorithm itself is bytegrad.cpp.
#include "algorithms/descriptors.h"
#include "algorithms/traffic_ledger.h"

namespace bagua::algorithms {

AlgorithmDescriptor bytegrad_descriptor() {
  AlgorithmDescriptor d;
  d.name = "bytegrad";
  d.description = "centralized, synchronous, 8-bit: compressed scatter-reduce and allgather of gradient buckets";
  d.defaults = {{"hierarchical", "auto"}, {"average", true}};
  d.traits.supports_hierarchical = true;
  d.plan_variants = {{{"hierarchical", true}}, {{"hierarchical", false}}};
  d.traffic = [](const TrafficContext& ctx, const nlohmann::json& kw) {
    PlanAlgorithm a;
    const bool hier = kw.value("hierarchical", false);
    // ByteGradImpl::bucket_options: a multiple of the world size, so a bucket
    // cuts into one equal chunk per rank.
    a.buckets = ctx.buckets(ctx.world.world_size, ctx.flatten, "gradients");
    a.phases.push_back(traffic::phase_of(
        "every step",
        hier ? "each gradient bucket reduced to the node leader in full precision, 8-bit alltoall and allgather "
               "among the leaders, broadcast in the node"
             : "each gradient bucket as 8-bit chunks: an alltoall, then an allgather",
        traffic::low_precision_ledger(ctx.world, a.buckets, hier)));
    a.buffer_bytes =
        traffic::low_precision_workspace_bytes(a.buckets, hier ? ctx.world.nnodes : ctx.world.world_size);
    if (!a.buckets.flatten) a.buffer_bytes += traffic::largest_bucket(a.buckets);  // Bucket::flat()'s shared copy
    return a;
  };
  return d;
}

}  // namespace bagua::algorithms
