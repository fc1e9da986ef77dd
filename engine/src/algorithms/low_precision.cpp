#include "algorithms/low_precision.h"

#include <bagua/compression.h>
#include <bagua/errors.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

namespace bagua::algorithms {

namespace {
// `slot`, reused when it already has `n` elements of `options`, else new.
at::Tensor& buffer(at::Tensor& slot, int64_t n, const at::TensorOptions& options) {
  if (!slot.defined() || slot.numel() != n || slot.scalar_type() != options.dtype().toScalarType() ||
      slot.device() != options.device()) {
    slot = at::empty({n}, options);
  }
  return slot;
}
// BAGUA_ALLTOALL_PIECE_BYTES, or 0 when unset.
int64_t piece_bytes_from_environment() {
  static const int64_t bytes = [] {
    const char* v = std::getenv("BAGUA_ALLTOALL_PIECE_BYTES");
    const long long n = v ? std::atoll(v) : 0;
    return n > 0 ? static_cast<int64_t>(n) : int64_t{0};
  }();
  return bytes;
}
}  // namespace

void alltoall_in_pieces(at::Tensor& send, at::Tensor& recv, int64_t stride, const ProcessGroupPtr& group,
                        LowPrecisionWorkspace& ws, int64_t piece, bool first_slot_to_all, const PieceLanded& landed) {
  if (piece <= 0) piece = piece_bytes_from_environment();
  // Within one node the transfer is a memory copy, and the pieces' staging
  // and calls only cost (about a tenth of bytegrad's step on one machine).
  if (piece <= 0) piece = group->intra_node_group().get() == group.get() ? stride : kAlltoallPieceBytes;
  const int n = group->size();
  if (stride <= piece || n == 1) {
    if (first_slot_to_all) {
      for (int j = 1; j < n; ++j) send.narrow(0, j * stride, stride).copy_(send.narrow(0, 0, stride));
    }
    alltoall(send, recv, group);
    if (landed) landed(0, stride);
    return;
  }
  // Two staging buffers each way: piece k + 1 is in flight while piece k is
  // copied out and handed to `landed`.
  at::Tensor& out = buffer(ws.piece_out, 2 * n * piece, send.options());
  at::Tensor& in = buffer(ws.piece_in, 2 * n * piece, recv.options());
  const int64_t pieces = (stride + piece - 1) / piece;
  auto len_of = [&](int64_t k) { return std::min(piece, stride - k * piece); };
  auto staged = [&](at::Tensor& t, int64_t k) { return t.narrow(0, (k % 2) * n * piece, n * len_of(k)); };
  std::vector<Work> works(2);
  auto post = [&](int64_t k) {
    at::Tensor o = staged(out, k), i = staged(in, k);
    for (int j = 0; j < n; ++j) {
      o.narrow(0, j * len_of(k), len_of(k))
          .copy_(send.narrow(0, (first_slot_to_all ? 0 : j) * stride + k * piece, len_of(k)));
    }
    works[k % 2] = alltoall_async(o, i, group);
  };
  post(0);
  for (int64_t k = 0; k < pieces; ++k) {
    if (k + 1 < pieces) post(k + 1);
    works[k % 2].wait();
    const at::Tensor i = staged(in, k);
    for (int j = 0; j < n; ++j) {
      recv.narrow(0, j * stride + k * piece, len_of(k)).copy_(i.narrow(0, j * len_of(k), len_of(k)));
    }
    if (landed) landed(k * piece, len_of(k));
  }
}

void compressed_allreduce(at::Tensor& flat, const ProcessGroupPtr& group, bool average, [[maybe_unused]] const std::string& what,
                          LowPrecisionWorkspace* workspace) {
  LowPrecisionWorkspace local;
  LowPrecisionWorkspace& ws = workspace ? *workspace : local;
  const int n = group->size(), r = group->rank();
  const int64_t numel = flat.numel();
  const int64_t per = MinMaxUInt8::chunk_numel(numel, n);
  const int64_t stride = MinMaxUInt8::chunk_stride(numel, n);
  auto len_of = [&](int64_t c) { return std::max<int64_t>(0, std::min(per, numel - c * per)); };
  auto slot_bytes = [&](int64_t c) { return MinMaxUInt8::compressed_bytes(len_of(c), 1); };
  const auto float_opts = flat.options().dtype(at::kFloat);
  const auto byte_opts = flat.options().dtype(at::kByte);

  // 1-2. Every chunk compressed on its own; rank r gets every rank's chunk r.
  at::Tensor& packed = buffer(ws.packed, n * stride, byte_opts);
  MinMaxUInt8::compress(flat, packed, n);
  at::Tensor& received = buffer(ws.received, n * stride, byte_opts);
  // 3 (below) runs piece by piece as the bytes land, while the next piece
  // is on the wire, where the data is on the CPU.
  const int64_t mine_len = len_of(r);
  at::Tensor& share = buffer(ws.share, mine_len, float_opts);
  std::vector<at::Tensor> versions;
  for (int i = 0; i < n; ++i) versions.push_back(received.narrow(0, i * stride, slot_bytes(r)));
  const bool by_piece = flat.is_cpu() && share.is_contiguous();
  auto values_in = [](int64_t offset, int64_t len, int64_t values) {  // the values whose bytes [offset, offset + len) holds
    const int64_t b = std::max<int64_t>(0, offset - MinMaxUInt8::kHeaderBytes);
    const int64_t e = std::min<int64_t>(values, offset + len - MinMaxUInt8::kHeaderBytes);
    return std::pair<int64_t, int64_t>{b, std::max(b, e)};
  };
  alltoall_in_pieces(packed, received, stride, group, ws, 0, false, [&](int64_t offset, int64_t len) {
    if (!by_piece) return;
    const auto [b, e] = values_in(offset, len, mine_len);
    if (e == b) return;
    at::Tensor part = share.narrow(0, b, e - b);
    MinMaxUInt8::decompress_sum_range(versions, mine_len, b, part, average);
  });
  // A chunk holding NaN or infinity was marked by its sender and
  // decompresses to NaN: it goes on through the share and the allgather, so
  // every rank ends with NaN in that chunk, alike. Whether that stops the
  // training, skips the step (train.on_nonfinite) or is the caller's to see
  // is decided above this layer, on every rank the same way; refusing here
  // would stop only the ranks that received a marked chunk, mid-protocol.

  // 3. This rank's share: the n versions of chunk r, added in rank order
  // (one pass over the received bytes on the CPU).
  if (!by_piece) MinMaxUInt8::decompress_sum(versions, share, average);

  // 4. The share compressed again, gathered, and every share decompressed.
  // The allgather is an alltoall of n copies of this rank's compressed
  // share, so that it lands in `gathered` as it is (c10d's Gloo allgather
  // receives into a fresh buffer of the whole result and copies out).
  at::Tensor& rows = buffer(ws.mine, n * stride, byte_opts);
  at::Tensor mine = rows.narrow(0, 0, stride);
  at::Tensor mine_packed = mine.narrow(0, 0, slot_bytes(r));
  MinMaxUInt8::compress(share, mine_packed, 1);
  mine.narrow(0, slot_bytes(r), stride - slot_bytes(r)).zero_();  // a shorter last share's padding
  at::Tensor& gathered = buffer(ws.gathered, n * stride, byte_opts);
  const bool direct = flat.scalar_type() == at::kFloat && flat.is_contiguous();
  at::Tensor out = direct ? flat : buffer(ws.out, numel, float_opts);
  at::Tensor out_flat = out.view({-1});
  // Every share decompressed into its place, piece by piece as above.
  alltoall_in_pieces(rows, gathered, stride, group, ws, 0, /*first_slot_to_all=*/true,
                     [&](int64_t offset, int64_t len) {
                       if (!by_piece) return;
                       for (int i = 0; i < n; ++i) {
                         const auto [b, e] = values_in(offset, len, len_of(i));
                         if (e == b) continue;
                         at::Tensor dst = out_flat.narrow(0, i * per + b, e - b);
                         MinMaxUInt8::decompress_range(gathered.narrow(0, i * stride, slot_bytes(i)), len_of(i), b,
                                                       dst);
                       }
                     });
  for (int i = 0; i < n && !by_piece; ++i) {
    const int64_t len = len_of(i);
    if (len == 0) continue;
    at::Tensor dst = out_flat.narrow(0, i * per, len);
    MinMaxUInt8::decompress(gathered.narrow(0, i * stride, slot_bytes(i)), dst, 1);
  }
  if (!out.is_same(flat)) flat.copy_(out.view(flat.sizes()));
}

void zero_padding(at::Tensor& flat, const Bucket& bucket) {
  const int64_t padding = bucket.padded_numel() - bucket.numel();
  if (padding > 0) flat.view({-1}).narrow(0, bucket.numel(), padding).zero_();
}

void centralized_low_precision(at::Tensor& flat, const ProcessGroupPtr& group, bool hierarchical, bool average,
                               const std::string& what, LowPrecisionWorkspace* workspace) {
  if (!hierarchical) {
    compressed_allreduce(flat, group, average, what, workspace);
    return;
  }
  auto intra = group->intra_node_group();
  reduce(flat, 0, average ? ReduceOp::AVG : ReduceOp::SUM, intra);
  if (intra->rank() == 0) compressed_allreduce(flat, group->node_leaders_group(), average, what, workspace);
  broadcast(flat, 0, intra);
}

}  // namespace bagua::algorithms
