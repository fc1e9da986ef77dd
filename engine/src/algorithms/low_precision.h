// Bagua's centralized low-precision synchronous operation, shared by
// ByteGrad (on gradients) and QAdam (on momentum): an average (or sum) of a
// flat tensor across a group where every value crosses the network as one
// MinMaxUInt8 byte.
#pragma once

#include <bagua/bucket.h>
#include <bagua/communication.h>

#include <ATen/core/Tensor.h>

#include <string>

namespace bagua::algorithms {

// Buffers compressed_allreduce() reuses from one call to the next (one per
// bucket), so a step allocates nothing: large fresh allocations cost more
// than the compression itself (page faults and zeroing). `mine` holds this
// rank's compressed share once per rank (the allgather's alltoall input).
struct LowPrecisionWorkspace {
  at::Tensor packed, received, share, mine, gathered, out;
};

// Over `group` of n ranks, in place on `flat` (1-D, contiguous, floating):
//   1. cut flat into n chunks, compress each (its own min/max);
//   2. alltoall: rank r receives every rank's chunk r;
//   3. decompress them and add them in float32 in rank order (divided by n
//      when `average`): rank r's share of the result;
//   4. compress that share, allgather, decompress every share into flat.
// Every value is quantised twice, as in Bagua, and every rank ends with the
// same bits. A NaN or infinity in any rank's chunk r makes rank r throw a
// user Error naming `what` and the rank (checked from the headers before
// anything is reduced).
// `workspace` may be null (buffers are then allocated for this call).
void compressed_allreduce(at::Tensor& flat, const ProcessGroupPtr& group, bool average, const std::string& what,
                          LowPrecisionWorkspace* workspace = nullptr);

// compressed_allreduce() as Bagua's hierarchical mode runs it when
// `hierarchical`: full-precision reduce (AVG or SUM) to each node's leader,
// compressed_allreduce() among the node leaders (so `average` divides by the
// number of nodes there), broadcast from the leader within the node.
// Zeroes the padding of a bucket's flat tensor (the elements past its
// tensors' own): the compressed exchange writes its chunks whole, a chunk
// that held NaN as NaN, padding included.
void zero_padding(at::Tensor& flat, const Bucket& bucket);

void centralized_low_precision(at::Tensor& flat, const ProcessGroupPtr& group, bool hierarchical, bool average,
                               const std::string& what, LowPrecisionWorkspace* workspace = nullptr);

}  // namespace bagua::algorithms
