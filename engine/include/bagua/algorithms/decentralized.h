// The decentralized algorithms (Bagua's decentralized and
// low_precision_decentralized, the latter in
// bagua/algorithms/low_precision_decentralized.h, included here): workers
// average weights with peers instead of averaging gradients, so each keeps
// its own model and they agree only approximately.
//
// Decentralized(hierarchical, peer_selection_mode, communication_interval):
// at a communication step (steps 1, 1 + k, 1 + 2k, ... for k =
// communication_interval) each rank's weights are copied in the forward-pre
// hook and averaged with its peers on the communication thread while
// forward and backward run on the local weights; after backward the average
// replaces the weights, then the optimizer applies the local gradient:
// x <- avg(x) - lr g(x). peer_selection_mode "all": the average over every
// rank (a scatter-reduce in rank order and an allgather: the same bytes as
// an allreduce, and the same bits on every run). "shift_one": rank r of n
// (n even) pairs, at its k-th communication step, with n/2 + ((k + r) mod
// n/2) when r < n/2, else with ((r - n/2 - k) mod n/2), and the pair takes
// (x_r + x_peer) / 2. hierarchical: the average within the node first
// (reduce to the leader), the leaders do the above among themselves (peers
// are nodes), then a broadcast within the node.
//
#pragma once

#include <bagua/algorithms/algorithm.h>
#include <bagua/algorithms/low_precision_decentralized.h>

#include <string>

namespace bagua {

class Decentralized : public KeywordAlgorithm {
 public:
  // Throws InvalidArgument for an unknown mode or an interval < 1.
  explicit Decentralized(bool hierarchical = true, std::string peer_selection_mode = "all",
                         int64_t communication_interval = 1);
  std::unique_ptr<AlgorithmImpl> reify(ProcessGroupPtr group) const override;
};

// Bagua's class name.
using DecentralizedAlgorithm = Decentralized;

// The peer of rank `rank` of `n` (even) at communication step `k` under
// shift_one (see above). Throws InvalidArgument for an odd n.
int shift_one_peer(int rank, int n, int64_t k);

}  // namespace bagua
