// Helpers for the algorithms that communicate weights (decentralized,
// low_precision_decentralized, async): the parameters themselves as the
// registered tensors, and buckets that copy them out and back.
#pragma once

#include <bagua/algorithms/algorithm.h>

#include <ATen/core/Tensor.h>

#include <vector>

namespace bagua::algorithms {

// Every build parameter (reverse order, as gradients), as a registered
// tensor whose value is the parameter's data; write_back() copies into it.
std::vector<BaguaTensor> weight_tensors(AlgorithmContext& ctx);

// Unflattened buckets (the parameters keep their own storage: the bucket's
// flat() is a copy, write_back() copies back) of the module's size.
BucketOptions weight_bucket_options(AlgorithmContext& ctx);

// Marks every registered tensor of every bucket ready: the buckets go out,
// in order, on the communication thread.
void mark_all_ready(AlgorithmContext& ctx);

// Buffers for average_all() of `numel` values over a group of `ranks`,
// allocated once (a bucket's weights are averaged every few steps: fresh
// tensors of that size would cost a page fault per 4 KiB every time).
class AverageWorkspace {
 public:
  AverageWorkspace() = default;
  AverageWorkspace(int64_t numel, int64_t ranks, const at::TensorOptions& options);
  // The values to average; after average_all(), their mean. Write into it
  // in place (it is a view of the padded buffer).
  at::Tensor& values() { return values_; }

 private:
  friend void average_all(AverageWorkspace& ws, const ProcessGroupPtr& group);
  int64_t ranks_ = 1;
  at::Tensor padded_;  // ranks x per values: values_, then zeros
  at::Tensor values_;  // padded_'s first numel values
  at::Tensor chunks_;  // what the alltoall delivers: every rank's copy of this rank's chunk
  at::Tensor rows_;    // this rank's chunk of the mean, once per rank (the second alltoall's input)
};

// The mean of ws.values() over `group` (of the workspace's size), in place:
// a scatter-reduce (chunks added in rank order) and an allgather (as an
// alltoall, into ws.values() directly), so every run gives the same bits.
void average_all(AverageWorkspace& ws, const ProcessGroupPtr& group);

}  // namespace bagua::algorithms
