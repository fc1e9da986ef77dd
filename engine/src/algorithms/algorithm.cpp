// Default hooks of AlgorithmImpl.
#include <bagua/algorithms/algorithm.h>

#include <algorithm>

namespace bagua {

AlgorithmImpl::AlgorithmImpl(ProcessGroupPtr group) : group_(std::move(group)) {
  if (group_->size() == 1) {
    // Alone, no peer's traffic can interleave with the user's: the group
    // itself serves (a duplicate would start Gloo threads of its own), and
    // its checks stay as the user set them.
    comm_ = group_;
    return;
  }
  comm_ = group_->duplicate();
  comm_->set_verify_collectives(false);
}

bool AlgorithmImpl::need_reset(AlgorithmContext&) { return false; }

std::vector<BaguaTensor> AlgorithmImpl::init_tensors(AlgorithmContext& ctx) {
  auto params = ctx.build_params();
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

BucketOptions AlgorithmImpl::bucket_options(AlgorithmContext& ctx) {
  BucketOptions options;
  options.bucket_bytes = ctx.bucket_bytes();
  options.flatten = ctx.do_flatten();
  return options;
}

void AlgorithmImpl::init_operations(AlgorithmContext&, Bucket&) {}
bool AlgorithmImpl::on_tensor_ready(AlgorithmContext&, Bucket&, size_t) { return true; }
void AlgorithmImpl::run_bucket(AlgorithmContext&, Bucket&) {}
void AlgorithmImpl::on_forward_pre(AlgorithmContext&) {}
void AlgorithmImpl::on_post_backward(AlgorithmContext& ctx) { ctx.wait_for_buckets(); }
void AlgorithmImpl::on_post_step(AlgorithmContext&) {}
void AlgorithmImpl::on_step_skipped(AlgorithmContext&) {}
void AlgorithmImpl::on_shutdown(AlgorithmContext&) {}
void AlgorithmImpl::pause_background(AlgorithmContext&) {}
void AlgorithmImpl::resume_background(AlgorithmContext&) {}
void AlgorithmImpl::save_state(torch::serialize::OutputArchive&) const {}
void AlgorithmImpl::load_state(torch::serialize::InputArchive&) {}

}  // namespace bagua
