#include <bagua/algorithms/bytegrad.h>

#include "algorithms/low_precision.h"

#include "algorithms/factories.h"

#include <map>

namespace bagua {
namespace {

class ByteGradImpl : public AlgorithmImpl {
 public:
  ByteGradImpl(ProcessGroupPtr group, bool hierarchical, bool average)
      : AlgorithmImpl(std::move(group)), hierarchical_(hierarchical), average_(average) {}

  // Buckets padded to a multiple of the group size, so they cut into one
  // equal chunk per rank (the padding is zeros and takes part, as in Bagua).
  BucketOptions bucket_options(AlgorithmContext& ctx) override {
    BucketOptions options = AlgorithmImpl::bucket_options(ctx);
    options.alignment = group_->size();
    return options;
  }

  void run_bucket(AlgorithmContext& ctx, Bucket& bucket) override {
    at::Tensor flat = bucket.flat();
    algorithms::centralized_low_precision(flat, comm_, hierarchical_, average_,
                                          "bytegrad, bucket " + bucket.name() + " at step " +
                                              std::to_string(ctx.step_counter()),
                                          &workspaces_[bucket.name()]);
    algorithms::zero_padding(flat, bucket);  // a NaN chunk reaches it too; flat()'s padding must stay zero
    bucket.write_back(flat);
  }

 private:
  bool hierarchical_;
  bool average_;
  std::map<std::string, algorithms::LowPrecisionWorkspace> workspaces_;  // by bucket; used on the comm thread only
};

}  // namespace

ByteGrad::ByteGrad(bool hierarchical, bool average)
    : KeywordAlgorithm("bytegrad", {{"hierarchical", hierarchical}, {"average", average}}) {}

std::unique_ptr<AlgorithmImpl> ByteGrad::reify(ProcessGroupPtr group) const {
  return std::make_unique<ByteGradImpl>(std::move(group), kwarg<bool>("hierarchical"), kwarg<bool>("average"));
}

algorithms::AlgorithmFactory algorithms::bytegrad_factory() {
  return {[](const nlohmann::json& kw, const AlgorithmBuildContext&) -> AlgorithmPtr {
    return std::make_shared<ByteGrad>(kw.at("hierarchical").get<bool>(), kw.at("average").get<bool>());
  }};
}

}  // namespace bagua
