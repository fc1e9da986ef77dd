// GradientAllReduce: centralized, synchronous, full precision (DDP's
// algorithm, Bagua's gradient_allreduce).
//
// Each bucket of gradients is allreduced as soon as all its gradients are
// ready, while backward goes on; all buckets are awaited at the end of
// backward, so the optimizer sees reduced gradients. average = true divides
// by the group size. hierarchical = true reduces within each node to its
// leader, allreduces among the leaders, and broadcasts within the node.
#pragma once

#include <bagua/algorithms/algorithm.h>

namespace bagua {

class GradientAllReduce : public KeywordAlgorithm {
 public:
  explicit GradientAllReduce(bool hierarchical = false, bool average = true);
  std::unique_ptr<AlgorithmImpl> reify(ProcessGroupPtr group) const override;
};

// Bagua's class name.
using GradientAllReduceAlgorithm = GradientAllReduce;

}  // namespace bagua
