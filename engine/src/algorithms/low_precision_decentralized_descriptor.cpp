// low_precision_decentralized as the rest of bagua sees it
// (bagua/algorithms/catalog.h); the algorithm itself is in decentralized.cpp.
#include "algorithms/descriptors.h"
#include "algorithms/traffic_ledger.h"
#include "common/minmax_layout.h"

#include <string>

namespace bagua::algorithms {

AlgorithmDescriptor low_precision_decentralized_descriptor() {
  using traffic::Op;
  using traffic::Where;
  AlgorithmDescriptor d;
  d.name = "low_precision_decentralized";
  d.description = "decentralized, synchronous, 8-bit: compressed weight differences exchanged around a ring";
  d.defaults = {{"hierarchical", "auto"}, {"communication_interval", 1}};
  d.traits.replicas_identical = false;
  d.traits.supports_hierarchical = true;
  d.traits.keeps_bucket_state = true;
  d.plan_variants = {{{"hierarchical", true}}, {{"hierarchical", false}}};
  d.traffic = [](const TrafficContext& ctx, const nlohmann::json& kw) {
    PlanAlgorithm a;
    const PlanWorld& world = ctx.world;
    const bool hier = kw.value("hierarchical", false);
    const int64_t every = kw.value("communication_interval", int64_t{1});
    a.buckets = ctx.buckets(1, /*flatten=*/false, "weights");
    traffic::Ledger l;
    int64_t buffers = 0;
    for (const auto& b : a.buckets.buckets) {
      const int64_t e = b.element_bytes, numel = b.padded_numel;
      const int64_t c = minmax_layout::compressed_bytes(numel, 1);
      // ring_step(): the compressed difference to both ring neighbours,
      // once in a ring of two (both are the one peer).
      auto ring = [&](int m, Where where, bool leaders_only) {
        if (m <= 1) return;  // a ring of one is its own neighbour
        l.add(Op::kSend, m, c, where, leaders_only);
        if (m > 2) l.add(Op::kSend, m, c, where, leaders_only);
      };
      const int ring_size = hier ? world.nnodes : world.world_size;
      if (!hier) {
        ring(world.world_size, Where::kWholeGroup, false);
      } else {
        l.add(Op::kReduce, world.nproc_per_node, traffic::reduction_bytes(world, b, numel), Where::kWithinNode);
        ring(world.nnodes, Where::kBetweenNodes, true);
        l.add(Op::kBroadcast, world.nproc_per_node, numel * e, Where::kWithinNode);
      }
      // State: w, left, right (left itself when not hierarchical in a ring
      // of two), diff, and x when hierarchical; mine, from_left, and
      // from_right in rings of three or more (the received differences
      // are decompressed straight into left and right).
      const int64_t floats = hier ? 5 : (ring_size == 2 ? 3 : 4);
      buffers += floats * numel * e + (ring_size > 2 ? 3 : 2) * c;
    }
    a.phases.push_back(traffic::phase_of("communication steps",
                                         std::string("the compressed weight difference (8 bits) to both ring neighbours") +
                                             (hier ? " (the ring of node leaders, after the mean within the node)" : ""),
                                         l, 1, std::nullopt, every));
    a.buffer_bytes = buffers;
    return a;
  };
  return d;
}

}  // namespace bagua::algorithms
