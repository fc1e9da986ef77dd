#include "algorithms/weights.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace bagua::algorithms {

std::vector<BaguaTensor> weight_tensors(AlgorithmContext& ctx) {
  auto params = ctx.build_params();
  std::reverse(params.begin(), params.end());
  std::vector<BaguaTensor> tensors;
  for (auto& [name, p] : params) {
    at::Tensor param = p;
    BaguaTensor t;
    t.name = name;
    t.get = [param] { return param.detach(); };
    t.set = [param](const at::Tensor& v) {
      at::NoGradGuard no_grad;
      param.detach().copy_(v);
    };
    t.dtype = param.scalar_type();
    t.device = param.device();
    t.shape = param.sizes().vec();
    tensors.push_back(std::move(t));
  }
  return tensors;
}

BucketOptions weight_bucket_options(AlgorithmContext& ctx) {
  BucketOptions options;
  options.bucket_bytes = ctx.bucket_bytes();
  options.flatten = false;
  return options;
}

void mark_all_ready(AlgorithmContext& ctx) {
  const auto& buckets = ctx.buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    for (size_t i = 0; i < buckets[b]->tensors().size(); ++i) ctx.mark_ready(b, i);
  }
}

AverageWorkspace::AverageWorkspace(int64_t numel, int64_t ranks, const at::TensorOptions& options)
    : ranks_(std::max<int64_t>(1, ranks)) {
  const int64_t per = (numel + ranks_ - 1) / ranks_;
  padded_ = at::zeros({ranks_ * per}, options);
  values_ = padded_.narrow(0, 0, numel);
  if (ranks_ > 1) {  // alone, the values are their own mean: no exchange buffers
    chunks_ = at::empty({ranks_, per}, options);
    rows_ = at::empty({ranks_, per}, options);
  }
}

void average_all(AverageWorkspace& ws, const ProcessGroupPtr& group) {
  const int64_t n = group->size();
  if (n == 1) return;
  if (n != ws.ranks_) {
    throw std::logic_error("average_all: a workspace for " + std::to_string(ws.ranks_) + " ranks used on " +
                           std::to_string(n));
  }
  // Rank j gets every rank's chunk j and adds them in rank order.
  alltoall(ws.padded_, ws.chunks_, group);
  at::Tensor mean = ws.rows_.select(0, 0);
  at::sum_out(mean, ws.chunks_, {0});
  mean.div_(n);
  // Then every rank's chunk of the mean to every rank: an allgather, made
  // an alltoall of n copies of the chunk so that it lands in padded_ where
  // it is. (c10d's Gloo allgather receives into a fresh buffer as large as
  // the whole result and copies out of it, every step.)
  for (int64_t r = 1; r < n; ++r) ws.rows_.select(0, r).copy_(mean);
  alltoall(ws.rows_, ws.padded_, group);
}

}  // namespace bagua::algorithms
