#include <bagua/bucket.h>
#include <bagua/errors.h>

#include "common/storage_alias.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <map>
#include <numeric>

namespace bagua {

int64_t BaguaTensor::numel() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
}

Bucket::Bucket(std::string name, std::vector<BaguaTensor> tensors, bool flatten, int64_t alignment)
    : name_(std::move(name)), tensors_(std::move(tensors)), flatten_(flatten) {
  if (tensors_.empty()) throw InvalidArgument("bucket " + name_ + " has no tensors");
  dtype_ = tensors_.front().dtype;
  device_ = tensors_.front().device;
  for (const auto& t : tensors_) {
    if (t.dtype != dtype_) throw InvalidArgument("bucket " + name_ + " mixes dtypes (" + t.name + ")");
    if (t.device != device_) throw InvalidArgument("bucket " + name_ + " mixes devices (" + t.name + ")");
    offsets_.push_back(numel_);
    numel_ += t.numel();
  }
  alignment = std::max<int64_t>(1, alignment);
  padded_numel_ = (numel_ + alignment - 1) / alignment * alignment;
  ready_.assign(tensors_.size(), false);
  direct_ = flatten_ && tensors_.size() == 1 && padded_numel_ == numel_;
  if (flatten_ && !direct_) buffer_ = at::zeros({padded_numel_}, at::TensorOptions().dtype(dtype_).device(device_));
}

int64_t Bucket::bytes() const { return padded_numel_ * static_cast<int64_t>(c10::elementSize(dtype_)); }

void Bucket::attach() {
  if (!flatten_) return;
  for (size_t i = 0; i < tensors_.size(); ++i) attach(i);
}

void Bucket::attach(size_t i) {
  if (!flatten_ || i >= tensors_.size()) return;
  at::NoGradGuard no_grad;
  at::Tensor current = tensors_[i].get();
  if (direct_) {
    // The tensor is the buffer: it only has to exist and be contiguous.
    if (!current.defined()) {
      tensors_[i].set(at::zeros(tensors_[i].shape, at::TensorOptions().dtype(dtype_).device(device_)));
    } else if (!current.is_contiguous()) {
      tensors_[i].set(current.contiguous());
    }
    return;
  }
  if (points_into(current, buffer_, offsets_[i])) return;
  at::Tensor alias = alias_into(buffer_, offsets_[i], tensors_[i].shape);
  if (current.defined()) {
    alias.copy_(current);
  } else {
    alias.zero_();
  }
  tensors_[i].set(alias);
}

at::Tensor Bucket::flat() {
  if (flatten_) {
    attach();
    if (direct_) {
      const at::Tensor t = tensors_.front().get();
      return alias_into(t, 0, {numel_});
    }
    return buffer_;
  }
  // A model-sized allocation every step would page-fault in again wherever
  // the allocator gives large blocks back: the copy reuses scratch memory.
  if (!scratch_) scratch_ = std::make_shared<at::Tensor>();
  at::Tensor& scratch = *scratch_;
  if (!scratch.defined() || scratch.numel() < padded_numel_) {
    scratch = at::empty({padded_numel_}, at::TensorOptions().dtype(dtype_).device(device_));
  }
  at::Tensor out = scratch.narrow(0, 0, padded_numel_);
  if (padded_numel_ > numel_) out.narrow(0, numel_, padded_numel_ - numel_).zero_();
  copy_into(out);
  return out;
}

void Bucket::copy_into(at::Tensor& out) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    at::Tensor current = tensors_[i].get();
    at::Tensor slice = out.narrow(0, offsets_[i], tensors_[i].numel());
    if (current.defined()) {
      slice.copy_(current.reshape({-1}));
    } else {
      slice.zero_();  // no gradient yet: zero, as it will be
    }
  }
}

void Bucket::write_back(const at::Tensor& flat) {
  if (flatten_) return;
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    at::Tensor slice = flat.narrow(0, offsets_[i], tensors_[i].numel()).view(tensors_[i].shape);
    at::Tensor current = tensors_[i].get();
    if (current.defined()) {
      current.copy_(slice);
    } else {
      tensors_[i].set(slice.clone());
    }
  }
}

bool Bucket::mark_ready(size_t index) {
  if (index >= ready_.size() || ready_[index]) return false;
  ready_[index] = true;
  return ++ready_count_ == ready_.size();
}

void Bucket::reset_ready() {
  ready_.assign(tensors_.size(), false);
  ready_count_ = 0;
}

std::vector<std::string> Bucket::missing() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!ready_[i]) out.push_back(tensors_[i].name);
  }
  return out;
}

std::vector<std::shared_ptr<Bucket>> make_buckets(const std::vector<BaguaTensor>& tensors,
                                                  const BucketOptions& options) {
  // One open bucket per dtype; a bucket closes when the next tensor would
  // push it past bucket_bytes. Buckets are ordered by their first tensor.
  struct Open {
    std::vector<BaguaTensor> tensors;
    int64_t bytes = 0;
    size_t first = 0;
  };
  std::map<std::pair<at::ScalarType, std::string>, Open> open;
  std::vector<std::pair<size_t, std::vector<BaguaTensor>>> closed;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    int64_t bytes = t.numel() * static_cast<int64_t>(c10::elementSize(t.dtype));
    Open& o = open[{t.dtype, t.device.str()}];
    if (!o.tensors.empty() && o.bytes + bytes > options.bucket_bytes) {
      closed.emplace_back(o.first, std::move(o.tensors));
      o = Open{};
    }
    if (o.tensors.empty()) o.first = i;
    o.tensors.push_back(t);
    o.bytes += bytes;
  }
  for (auto& [dtype, o] : open) {
    if (!o.tensors.empty()) closed.emplace_back(o.first, std::move(o.tensors));
  }
  std::sort(closed.begin(), closed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::shared_ptr<Bucket>> buckets;
  std::map<std::pair<at::ScalarType, std::string>, std::shared_ptr<at::Tensor>> scratch;  // flat()'s, shared
  for (auto& [first, ts] : closed) {
    buckets.push_back(std::make_shared<Bucket>("bucket" + std::to_string(buckets.size()), std::move(ts),
                                               options.flatten, options.alignment));
    Bucket& b = *buckets.back();
    if (!options.flatten) {
      auto& shared = scratch[{b.dtype(), b.device().str()}];
      if (!shared) shared = std::make_shared<at::Tensor>();
      b.scratch_ = shared;
    }
  }
  return buckets;
}

}  // namespace bagua
