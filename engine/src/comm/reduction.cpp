#include "comm/reduction.h"

#include <bagua/errors.h>

#include <ATen/ATen.h>

namespace bagua::comm {

void check_op_supported(ReduceOp op, at::ScalarType type, const std::string& what) {
  bool bitwise = op == ReduceOp::BAND || op == ReduceOp::BOR || op == ReduceOp::BXOR;
  std::string why;
  if (at::isComplexType(type) && op != ReduceOp::SUM && op != ReduceOp::AVG && op != ReduceOp::PRODUCT) {
    why = "complex numbers have no order and no bits to combine (SUM, AVG and PRODUCT work)";
  } else if (at::isFloatingType(type) && bitwise) {
    why = "bitwise ops need integral or bool tensors";
  } else if (type == at::kBool && (op == ReduceOp::SUM || op == ReduceOp::AVG)) {
    why = "it is ambiguous on bool tensors: use BOR (any) or BAND (all)";
  }
  if (!why.empty()) {
    throw InvalidArgument(what + ": ReduceOp " + to_string(op) + " is not defined on " +
                          c10::toString(type) + " tensors: " + why);
  }
}

bool needs_local_reduction(ReduceOp op, at::ScalarType type, bool nccl) {
  const bool bitwise = op == ReduceOp::BAND || op == ReduceOp::BOR || op == ReduceOp::BXOR;
  return (at::isComplexType(type) && op == ReduceOp::PRODUCT) || (nccl && bitwise);
}

WirePlan plan_wire_reduction(const at::Tensor& target, ReduceOp op, int group_size, bool nccl) {
  const bool avg = op == ReduceOp::AVG;
  const at::ScalarType type = target.scalar_type();
  WirePlan plan{target, avg ? ReduceOp::SUM : op, nullptr};
  const int64_t n = group_size;
  if (at::isComplexType(type)) {
    plan.buffer = at::view_as_real(target);
  } else if (type == at::kBool) {
    plan.buffer = target.to(at::kByte);
  } else if (at::isIntegralType(type, /*includeBool=*/false)) {
    if (avg && type != at::kLong) {
      plan.buffer = target.to(at::kLong);
    } else if (type == at::kShort) {
      // Neither Gloo nor NCCL reduces int16: int32 on the wire, then back
      // to int16, which wraps as int16 arithmetic would (sums, products and
      // bitwise ops keep their low 16 bits).
      plan.buffer = target.to(at::kInt);
    }
  } else if (!nccl && (type == at::kHalf || type == at::kBFloat16)) {
    plan.buffer = target.to(at::kFloat);
  }
  at::Tensor buffer = plan.buffer;
  const bool integral = at::isIntegralType(buffer.scalar_type(), /*includeBool=*/true);
  const bool copy_back = !buffer.is_same(target) && !at::isComplexType(type);
  plan.finish = [=]() mutable {
    if (avg) {
      if (integral) {
        buffer.div_(n, "trunc");
      } else {
        buffer.div_(n);
      }
    }
    if (copy_back) target.copy_(type == at::kBool ? buffer.ne(0) : buffer);
  };
  return plan;
}

at::Tensor reduce_rows(const at::Tensor& stacked, ReduceOp op) {
  const at::ScalarType type = stacked.scalar_type();
  const int64_t n = stacked.size(0);
  at::Tensor rows = type == at::kBool ? stacked.to(at::kByte) : stacked;
  at::Tensor out;
  switch (op) {
    case ReduceOp::SUM: out = rows.sum(0, false, rows.scalar_type()); break;
    case ReduceOp::PRODUCT: out = rows.prod(0, false, rows.scalar_type()); break;
    case ReduceOp::MIN: out = std::get<0>(rows.min(0)); break;
    case ReduceOp::MAX: out = std::get<0>(rows.max(0)); break;
    case ReduceOp::AVG:
      if (at::isIntegralType(type, true)) {
        out = rows.to(at::kLong).sum(0).div_(n, "trunc").to(type);
      } else {
        out = rows.sum(0).div_(n);
      }
      break;
    case ReduceOp::BAND:
    case ReduceOp::BOR:
    case ReduceOp::BXOR:
      out = rows[0].clone();
      for (int64_t r = 1; r < n; ++r) {
        if (op == ReduceOp::BAND) out.bitwise_and_(rows[r]);
        if (op == ReduceOp::BOR) out.bitwise_or_(rows[r]);
        if (op == ReduceOp::BXOR) out.bitwise_xor_(rows[r]);
      }
      break;
  }
  return type == at::kBool ? out.ne(0) : out;
}

}  // namespace bagua::comm
