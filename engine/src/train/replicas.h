// The ranks' models seen as one: what evaluations and checkpoints use, and
// the check at the end that the ranks agree.
//
// Contract:
//   - ReplicaAverage::run(fn) runs `fn` with every rank's weights replaced
//     by the ranks' average (algorithms that keep one model per rank), then
//     puts each rank's own back, also when fn throws. For algorithms whose
//     replicas are identical only the floating-point buffers (BatchNorm's
//     running statistics, which saw each rank's own batches) become the
//     ranks' average, and stay so: evaluations and model.pt then use the
//     same statistics everywhere (training forwards use batch statistics,
//     so no step changes). One flat allreduce per dtype. Collective.
//   - final_agreement() compares the ranks' weights once at the end (a
//     checksum and a position-weighted checksum per rank, allgathered) and
//     gathers each rank's peak resident memory with them. Collective.
#pragma once

#include <bagua/communication.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace bagua::train {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

class ReplicaAverage {
 public:
  // `params`, `buffers`: the model's, in model order; `group`: every rank.
  ReplicaAverage(NamedTensors params, NamedTensors buffers, bool replicas_identical, ProcessGroupPtr group);
  void run(const std::function<void()>& fn);

 private:
  void average_floating_buffers();
  void average_in_place(const std::vector<at::Tensor>& tensors);

  NamedTensors params_, buffers_;
  bool replicas_identical_;
  ProcessGroupPtr group_;
};

struct FinalAgreement {
  bool no_weights = false;  // nothing was averaged (model.ignore_params matches every parameter)
  bool agree = true;        // every rank's weights have rank 0's checksums
  std::vector<int64_t> peak_rss_bytes;  // per rank
};

// `averaged`: the parameters the algorithm communicates
// (BaguaModule::bagua_build_params()); `control`: every rank, Gloo.
FinalAgreement final_agreement(const NamedTensors& averaged, const ProcessGroupPtr& control);

}  // namespace bagua::train
