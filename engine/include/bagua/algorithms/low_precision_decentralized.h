// Bagua's low_precision_decentralized: workers average weights with their
// ring neighbours through 8-bit compressed differences, so each keeps its
// own model and they agree only approximately.
//
// LowPrecisionDecentralized(hierarchical, communication_interval): the
// ranks form a ring. Each keeps w (its weights at the last communication)
// and replicas L and R of its left and right neighbours' weights, all equal
// to the initial weights at the start. After the optimizer step of a
// communication step, with x the weights:
//   d = x + L/3 + R/3 - 5/3 w           (the move toward the neighbourhood
//                                        average plus the local progress)
//   c = MinMaxUInt8(d), sent to both neighbours
//   L += D(c from left);  R += D(c from right)
//   x = w + D(c);  w = x
// hierarchical: within a node the weights are averaged to the leader, the
// leaders form the ring, the leader broadcasts. Bagua's formula and state.
#pragma once

#include <bagua/algorithms/algorithm.h>

#include <string>

namespace bagua {

class LowPrecisionDecentralized : public KeywordAlgorithm {
 public:
  // Throws InvalidArgument for an interval < 1.
  explicit LowPrecisionDecentralized(bool hierarchical = true, int64_t communication_interval = 1);
  std::unique_ptr<AlgorithmImpl> reify(ProcessGroupPtr group) const override;
};

// Bagua's class name.
using LowPrecisionDecentralizedAlgorithm = LowPrecisionDecentralized;

}  // namespace bagua
