// Default hooks of AlgorithmImpl.
#include <bagua/algorithms/algorithm.h>
#include <bagua/distributed.h>

#include <algorithm>

namespace bagua {

bool AlgorithmImpl::need_reset(BaguaModule&) { return false; }

std::vector<BaguaTensor> AlgorithmImpl::init_tensors(BaguaModule& module) {
  auto params = module.bagua_build_params();
  std::reverse(params.begin(), params.end());  // backward produces gradients last layer first
  std::vector<BaguaTensor> tensors;
  for (auto& [name, p] : params) {
    at::Tensor param = p;
    BaguaTensor t;
    t.name = name;
    t.get = [param] { return param.grad(); };
    t.set = [param](const at::Tensor& g) mutable { param.mutable_grad() = g; };
    t.dtype = param.scalar_type();
    t.device = param.device();
    t.shape = param.sizes().vec();
    tensors.push_back(std::move(t));
  }
  return tensors;
}

BucketOptions AlgorithmImpl::bucket_options(BaguaModule& module) {
  BucketOptions options;
  options.bucket_bytes = module.options().bucket_bytes;
  options.flatten = module.options().do_flatten;
  return options;
}

void AlgorithmImpl::init_operations(BaguaModule&, Bucket&) {}
void AlgorithmImpl::run_bucket(BaguaModule&, Bucket&) {}
void AlgorithmImpl::on_forward_pre(BaguaModule&) {}
void AlgorithmImpl::on_post_backward(BaguaModule& module) { module.wait_for_buckets(); }
void AlgorithmImpl::on_post_step(BaguaModule&) {}

}  // namespace bagua
