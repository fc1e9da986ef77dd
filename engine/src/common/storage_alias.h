// Tensors that share another tensor's storage without being autograd views
// of it: what flattened buckets and the fused optimizer put in place of
// gradients (and parameters), so that optimizers may detach_() and zero_()
// them in place (LibTorch's zero_grad does), which is forbidden on views.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

namespace bagua {

// A tensor over `buffer`'s storage at element `offset` with `shape`, contiguous.
inline at::Tensor alias_into(const at::Tensor& buffer, int64_t offset, at::IntArrayRef shape) {
  at::NoGradGuard no_grad;
  at::Tensor alias = at::empty({0}, buffer.options());
  alias.set_(buffer.storage(), buffer.storage_offset() + offset, shape, c10::contiguous_strides(shape));
  return alias;
}

// Whether `t` is contiguous and lives in `buffer`'s storage at element `offset`.
inline bool points_into(const at::Tensor& t, const at::Tensor& buffer, int64_t offset) {
  return t.defined() && t.is_contiguous() && t.storage().is_alias_of(buffer.storage()) &&
         t.storage_offset() == buffer.storage_offset() + offset;
}

}  // namespace bagua
