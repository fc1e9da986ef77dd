// Buckets: the units in which registered tensors (usually gradients) are
// communicated.
//
// BucketBuilder splits tensors, in the order given (BaguaModule registers
// parameters in reverse order, the order their gradients become ready), into
// buckets of one dtype each, filled greedily up to `bucket_bytes`. With
// flattening, a bucket owns one contiguous buffer and every tensor becomes a
// view into it, so an operation on the bucket works on the buffer without
// copies; without, operations copy in and out, with identical results. A
// flattened bucket of one tensor and no padding owns no buffer: the tensor
// is its buffer, wherever it lives (a gradient that backward wrote afresh
// after zero_grad set it to none is communicated where it lies, uncopied).
#pragma once

#include <bagua/defaults.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace bagua {

// A tensor registered for communication, reached through accessors because
// the tensor behind a name can change (a parameter's .grad is replaced when
// the optimizer sets it to none).
struct BaguaTensor {
  std::string name;                      // e.g. "0.weight" (gradient of that parameter)
  std::function<at::Tensor()> get;       // the current tensor (may be undefined)
  std::function<void(const at::Tensor&)> set;  // make this the tensor (a view into the bucket)
  at::ScalarType dtype;
  at::Device device = at::kCPU;          // where the bucket's buffer lives
  std::vector<int64_t> shape;
  int64_t numel() const;
};

struct BucketOptions;

class Bucket {
 public:
  Bucket(std::string name, std::vector<BaguaTensor> tensors, bool flatten, int64_t alignment);

  const std::string& name() const { return name_; }
  const std::vector<BaguaTensor>& tensors() const { return tensors_; }
  at::ScalarType dtype() const { return dtype_; }
  at::Device device() const { return device_; }
  bool flattened() const { return flatten_; }
  // Elements of the registered tensors, and with padding for the alignment.
  int64_t numel() const { return numel_; }
  int64_t padded_numel() const { return padded_numel_; }
  int64_t bytes() const;

  // With flattening: points every registered tensor at its view of the
  // buffer (copying the current value in). Call again whenever a tensor may
  // have been replaced; tensors still pointing into the buffer are skipped.
  // A one-tensor bucket (direct()) only makes its tensor defined (zeros)
  // and contiguous.
  void attach();
  // The same for the index-th tensor alone (BaguaModule calls it as each
  // gradient becomes ready, while the fresh gradient is still in cache).
  void attach(size_t index);
  // Flattened, one tensor, no padding: the tensor is the buffer.
  bool direct() const { return direct_; }
  // The bucket's data as one flat tensor of padded_numel() elements: the
  // buffer itself when flattened (the tensor itself when direct()), else a copy of the tensors (pass it to
  // write_back() after the operation). Padding is zero. The copy lives in
  // scratch memory allocated once and reused by later calls, shared by the
  // unflattened buckets make_buckets() made together (of one dtype and
  // device): finish with one bucket's flat() before calling another's.
  at::Tensor flat();
  // Without flattening: copies the tensors into `out` (at least
  // padded_numel() elements, the bucket's dtype and device), allocating
  // nothing; an undefined tensor (no gradient yet) is copied as zeros, and
  // the padding of `out` is left as it is. Algorithms that keep
  // their own buffer use this instead of flat() on every step.
  void copy_into(at::Tensor& out);
  // Copies `flat` back into the tensors (a no-op when flattened).
  void write_back(const at::Tensor& flat);

  // Readiness during backward: mark_ready() returns true when this call
  // made the bucket complete.
  bool mark_ready(size_t index);
  bool ready() const { return ready_count_ == tensors_.size(); }
  void reset_ready();
  // Names of the tensors not marked ready since the last reset.
  std::vector<std::string> missing() const;

 private:
  std::string name_;
  std::vector<BaguaTensor> tensors_;
  std::vector<int64_t> offsets_;
  std::vector<bool> ready_;
  size_t ready_count_ = 0;
  at::ScalarType dtype_;
  at::Device device_ = at::kCPU;
  bool flatten_;
  bool direct_ = false;
  int64_t numel_ = 0;
  int64_t padded_numel_ = 0;
  at::Tensor buffer_;
  std::shared_ptr<at::Tensor> scratch_;  // unflattened: flat()'s copy, grown to the largest bucket sharing it

  friend std::vector<std::shared_ptr<Bucket>> make_buckets(const std::vector<BaguaTensor>& tensors,
                                                           const BucketOptions& options);
};

struct BucketOptions {
  // Bytes per bucket before a new one starts (a tensor larger than this
  // gets a bucket of its own).
  int64_t bucket_bytes = kDefaultBucketBytes;
  // Pad each bucket's element count to a multiple of this (ByteGrad uses
  // the world size so the buffer splits evenly). 1 = no padding.
  int64_t alignment = 1;
  bool flatten = true;
};

// Splits `tensors` (kept in order) into buckets, one dtype and device per bucket.
std::vector<std::shared_ptr<Bucket>> make_buckets(const std::vector<BaguaTensor>& tensors,
                                                  const BucketOptions& options);

}  // namespace bagua
