// ByteGrad: centralized, synchronous, 8-bit (Bagua's bytegrad).
//
// Gradient buckets (aligned to the group size) go out during backward, as
// with GradientAllReduce, but every value crosses the network as one byte
// (MinMaxUInt8, per chunk): each rank compresses its bucket in one chunk per
// rank, an alltoall gives rank r every rank's chunk r, rank r decompresses
// and adds them (divided by the group size when `average`), compresses the
// result, and an allgather gives every rank every result, decompressed into
// the bucket. About a quarter of gradient_allreduce's bytes, and every rank
// keeps identical weights; the price is quantisation noise (two roundings
// of at most (max - min) / 510 each, per chunk).
//
// hierarchical (the default, as Bagua's): within a node the gradients are
// reduced to the node's leader in full precision, only the leaders run the
// compressed exchange, and the leader broadcasts within the node. On one
// machine that means no compression at all: set hierarchical = false there.
#pragma once

#include <bagua/algorithms/algorithm.h>

namespace bagua {

class ByteGrad : public KeywordAlgorithm {
 public:
  explicit ByteGrad(bool hierarchical = true, bool average = true);
  std::unique_ptr<AlgorithmImpl> reify(ProcessGroupPtr group) const override;
};

// Bagua's class name.
using ByteGradAlgorithm = ByteGrad;

}  // namespace bagua
