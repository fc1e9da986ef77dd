// Bagua's centralized low-precision synchronous operation, shared by
// ByteGrad (on gradients) and QAdam (on momentum): an average (or sum) of a
// flat tensor across a group where every value crosses the network as one
// MinMaxUInt8 byte.
#pragma once

#include <bagua/bucket.h>
#include <bagua/communication.h>

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>

namespace bagua::algorithms {

// Buffers compressed_allreduce() reuses from one call to the next (one per
// bucket), so a step allocates nothing: large fresh allocations cost more
// than the compression itself (page faults and zeroing). `mine` holds this
// rank's compressed share once per rank (the allgather's alltoall input).
struct LowPrecisionWorkspace {
  at::Tensor packed, received, share, mine, gathered, out;
  at::Tensor piece_out, piece_in;  // staging of the alltoalls cut into pieces
};

// The alltoall of two slot-major buffers (slot j of `send`, `stride` bytes
// at j * stride, goes to rank j; slot i of `recv` comes from rank i), as a
// sequence of alltoalls of at most `piece` bytes per slot through staging
// buffers in `ws`, or as one alltoall when a slot fits in a piece. The
// bytes moved are the same either way; only their transfer is cut. Over a
// network Gloo moves one large alltoall at about half a slow link's rate
// (docs/benchmarks.md), pieces of 512 KiB near the link's rate; within one
// node the pieces only cost. `piece` <= 0: BAGUA_ALLTOALL_PIECE_BYTES when
// set (a test aid: small pieces exercise the cutting on small models, on
// one node too), else kAlltoallPieceBytes when the group spans nodes, and
// no cut when all its members share one. `first_slot_to_all`: send's first slot goes
// to every rank (an allgather), whatever its other slots hold (filled with
// copies of it only when the alltoall is not cut).
// `landed(offset, len)`, when given, is called once bytes [offset, offset +
// len) of every slot are in `recv`, in order, while the next piece is
// already on the wire (one call for the whole slot when not cut), so that
// the caller's work on them overlaps the transfer.
constexpr int64_t kAlltoallPieceBytes = int64_t{1} << 19;
using PieceLanded = std::function<void(int64_t offset, int64_t len)>;
void alltoall_in_pieces(at::Tensor& send, at::Tensor& recv, int64_t stride, const ProcessGroupPtr& group,
                        LowPrecisionWorkspace& ws, int64_t piece = 0, bool first_slot_to_all = false,
                        const PieceLanded& landed = nullptr);

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
