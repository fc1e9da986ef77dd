#include <bagua/algorithms/gradient_allreduce.h>

#include <ATen/ATen.h>

#include "algorithms/factories.h"

namespace bagua {
namespace {

class GradientAllReduceImpl : public AlgorithmImpl {
 public:
  GradientAllReduceImpl(ProcessGroupPtr group, bool hierarchical, bool average)
      : AlgorithmImpl(std::move(group)), hierarchical_(hierarchical), average_(average) {}

  bool idle_when_alone() const override { return true; }

  void run_bucket(AlgorithmContext&, Bucket& bucket) override {
    at::Tensor flat = bucket.flat();
    if (!hierarchical_) {
      allreduce(flat, average_ ? ReduceOp::AVG : ReduceOp::SUM, comm_);
    } else {
      auto intra = comm_->intra_node_group();
      auto leaders = comm_->node_leaders_group();
      reduce(flat, 0, ReduceOp::SUM, intra);
      if (intra->rank() == 0) {  // this rank is its node's leader
        allreduce(flat, ReduceOp::SUM, leaders);
        if (average_) flat.div_(comm_->size());
      }
      broadcast(flat, 0, intra);
    }
    bucket.write_back(flat);
  }

 private:
  bool hierarchical_;
  bool average_;
};

}  // namespace

GradientAllReduce::GradientAllReduce(bool hierarchical, bool average)
    : KeywordAlgorithm("gradient_allreduce", {{"hierarchical", hierarchical}, {"average", average}}) {}

std::unique_ptr<AlgorithmImpl> GradientAllReduce::reify(ProcessGroupPtr group) const {
  return std::make_unique<GradientAllReduceImpl>(std::move(group), kwarg<bool>("hierarchical"),
                                                 kwarg<bool>("average"));
}

algorithms::AlgorithmFactory algorithms::gradient_allreduce_factory() {
  return {[](const nlohmann::json& kw, const AlgorithmBuildContext&) -> AlgorithmPtr {
    return std::make_shared<GradientAllReduce>(kw.at("hierarchical").get<bool>(), kw.at("average").get<bool>());
  }};
}

}  // namespace bagua
