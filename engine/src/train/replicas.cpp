#include "train/replicas.h"

#include <torch/torch.h>

#include <sys/resource.h>

#include <exception>
#include <map>

namespace bagua::train {

ReplicaAverage::ReplicaAverage(NamedTensors params, NamedTensors buffers, bool replicas_identical,
                               ProcessGroupPtr group)
    : params_(std::move(params)), buffers_(std::move(buffers)), replicas_identical_(replicas_identical),
      group_(std::move(group)) {}

void ReplicaAverage::run(const std::function<void()>& fn) {
  torch::NoGradGuard no_grad;
  if (replicas_identical_) {
    average_floating_buffers();
    fn();
    return;
  }
  // Floating parameters and buffers, one flat average per dtype.
  std::vector<at::Tensor> tensors;
  for (const auto& [name, p] : params_) tensors.push_back(p);
  for (const auto& [name, b] : buffers_) {
    if (at::isFloatingType(b.scalar_type())) tensors.push_back(b);
  }
  std::vector<at::Tensor> own;
  for (const auto& t : tensors) own.push_back(t.detach().clone());
  average_in_place(tensors);
  std::exception_ptr error;
  try {
    fn();
  } catch (...) {
    error = std::current_exception();
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].detach().copy_(own[i]);
  if (error) std::rethrow_exception(error);
}

void ReplicaAverage::average_floating_buffers() {
  if (group_->size() == 1) return;
  std::vector<at::Tensor> floating;
  for (const auto& [name, b] : buffers_) {
    if (at::isFloatingType(b.scalar_type())) floating.push_back(b);
  }
  average_in_place(floating);
}

// Each tensor becomes the ranks' average: one flat allreduce per dtype.
void ReplicaAverage::average_in_place(const std::vector<at::Tensor>& tensors) {
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  for (auto& [dtype, group] : by_dtype) {
    std::vector<at::Tensor> parts;
    for (const auto& t : group) parts.push_back(t.detach().reshape({-1}));
    at::Tensor flat = torch::cat(parts);
    allreduce(flat, ReduceOp::AVG, group_);
    int64_t offset = 0;
    for (auto& t : group) {
      t.detach().copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

FinalAgreement final_agreement(const NamedTensors& averaged, const ProcessGroupPtr& control) {
  std::vector<at::Tensor> parts;
  for (const auto& [name, p] : averaged) parts.push_back(p.detach().reshape({-1}).to(torch::kCPU, torch::kDouble));
  // (None at all when model.ignore_params matches every parameter.)
  at::Tensor flat = parts.empty() ? torch::zeros({0}, torch::kDouble) : torch::cat(parts);
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  const double peak_rss = static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux: KiB
  at::Tensor mine = torch::stack({flat.sum(), (flat * torch::arange(flat.numel(), torch::kDouble)).sum(),
                                  torch::tensor(peak_rss, torch::kDouble)});
  const int world = control->size();
  at::Tensor all = torch::zeros({world, 3}, torch::kDouble);
  allgather(mine, all, control);
  FinalAgreement out;
  out.no_weights = parts.empty();
  for (int r = 1; r < world; ++r) {
    out.agree = out.agree && torch::equal(all[r].narrow(0, 0, 2), all[0].narrow(0, 0, 2));
  }
  for (int r = 0; r < world; ++r) out.peak_rss_bytes.push_back(static_cast<int64_t>(all[r][2].item<double>()));
  return out;
}

}  // namespace bagua::train
