// decentralized as the rest of bagua sees it (bagua/algorithms/catalog.h),
// and its peer schedule; the algorithm itself is decentralized.cpp.
#include <bagua/errors.h>

#include "algorithms/descriptors.h"
#include "algorithms/traffic_ledger.h"

#include <algorithm>
#include <string>

namespace bagua {

// bagua/algorithms/decentralized.h: no LibTorch in it, so the descriptor's
// checks and traffic model use it too.
int shift_one_peer(int rank, int n, int64_t k) {
  if (n % 2 != 0 || n < 2) {
    throw InvalidArgument("decentralized shift_one pairs peers, so it needs an even number of them; got " +
                          std::to_string(n) + " (with hierarchical, the peers are the nodes)");
  }
  const int64_t h = n / 2;
  if (rank < h) return static_cast<int>(h + (k + rank) % h);
  return static_cast<int>(((rank - h - k) % h + h) % h);
}

namespace algorithms {

AlgorithmDescriptor decentralized_descriptor() {
  using traffic::Op;
  using traffic::Where;
  AlgorithmDescriptor d;
  d.name = "decentralized";
  d.description = "decentralized, synchronous, full precision: weights averaged with peers while forward and backward run";
  d.defaults = {{"hierarchical", "auto"}, {"peer_selection_mode", "all"}, {"communication_interval", 1}};
  d.traits.replicas_identical = false;
  d.traits.supports_hierarchical = true;
  d.plan_variants = {{{"hierarchical", true}},
                     {{"hierarchical", false}},
                     {{"hierarchical", true}, {"peer_selection_mode", "shift_one"}},
                     {{"hierarchical", false}, {"peer_selection_mode", "shift_one"}}};
  d.check_world = [](const nlohmann::json& kw, int nnodes, int nproc_per_node) -> std::optional<KwargProblem> {
    if (kw.value("peer_selection_mode", std::string("all")) != "shift_one") return std::nullopt;
    const bool hierarchical = kw.value("hierarchical", true);
    const int64_t peers = hierarchical ? nnodes : int64_t{nnodes} * nproc_per_node;
    if (peers % 2 == 0) return std::nullopt;
    const std::string why = hierarchical
                                ? "with hierarchical: true the peers are the nodes: distributed.nnodes = " +
                                      std::to_string(peers)
                                : "peers = distributed.nnodes x nproc_per_node = " + std::to_string(peers);
    return KwargProblem{"peer_selection_mode", "shift_one pairs peers, so it needs an even number of peers (" + why +
                                                   "; use peer_selection_mode: all or change the layout)"};
  };
  d.traffic = [](const TrafficContext& ctx, const nlohmann::json& kw) {
    PlanAlgorithm a;
    const PlanWorld& world = ctx.world;
    const bool hier = kw.value("hierarchical", false);
    const std::string mode = kw.value("peer_selection_mode", std::string("all"));
    const int64_t every = kw.value("communication_interval", int64_t{1});
    a.buckets = ctx.buckets(1, /*flatten=*/false, "weights");
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
    traffic::Ledger l;
    int64_t buffers = 0;
    for (const auto& b : a.buckets.buckets) {
      const int64_t e = b.element_bytes, numel = b.padded_numel;
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
        l.add(Op::kReduce, world.nproc_per_node, traffic::reduction_bytes(world, b, numel), Where::kWithinNode);
        exchange(world.nnodes, Where::kBetweenNodes, true);
        l.add(Op::kBroadcast, world.nproc_per_node, numel * e, Where::kWithinNode);
      }
      // AverageWorkspace (rank 0 is a peer): the padded values, and with
      // company the chunks received and the rows of the mean sent; and
      // shift_one's buffer for theirs.
      const int64_t ranks = mode == "all" ? std::max(1, peers) : 1;
      const int64_t per = (numel + ranks - 1) / ranks;
      buffers += ranks * per * e + (ranks > 1 ? 2 * ranks * per * e : 0);
      if (mode == "shift_one") buffers += numel * e;
    }
    a.phases.push_back(traffic::phase_of("communication steps", what, l, 1, std::nullopt, every));
    a.buffer_bytes = buffers;
    return a;
  };
  return d;
}

}  // namespace algorithms
}  // namespace bagua
