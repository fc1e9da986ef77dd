// How a reduction is carried out on a backend that lacks some ops or dtypes
// (Gloo: no AVG, no complex, no bool; narrow integers overflow before AVG
// divides), and the local reduction used when chunks are reduced after an
// alltoall/allgather (reduce_scatter, complex PRODUCT).
#pragma once

#include <bagua/communication.h>

#include <ATen/core/Tensor.h>

#include <functional>

namespace bagua::comm {

// Throws InvalidArgument when `op` is undefined on `type`.
void check_op_supported(ReduceOp op, at::ScalarType type, const std::string& what);

// True when this (dtype, op) is reduced by gathering every rank's data and
// reducing locally, because the backend does not reduce it natively
// (complex PRODUCT anywhere; bitwise ops on NCCL).
bool needs_local_reduction(ReduceOp op, at::ScalarType type, bool nccl);

// The tensor that goes on the wire, the op the backend applies, and the step
// that turns the wire result into the caller's result in `target`.
struct WirePlan {
  at::Tensor buffer;
  ReduceOp wire_op;
  std::function<void()> finish;
};
WirePlan plan_wire_reduction(const at::Tensor& target, ReduceOp op, int group_size, bool nccl);

// Reduces `stacked` ([n, m]) over dim 0, in rank order, into an [m] tensor
// of the same dtype.
at::Tensor reduce_rows(const at::Tensor& stacked, ReduceOp op);

}  // namespace bagua::comm
