// CachedDataset: samples through a CacheLoader, stacked as the wrapped
// dataset stacks them.
#include <bagua/cache.h>

#include "data/dataset_impl.h"
#include "store/sample_codec.h"
#include "store/key_sharding.h"

#include <algorithm>

namespace bagua {
namespace {

// Stacks one-sample batches along dimension 0. Inputs of one shape are
// concatenated; int64 sequences ([1, L]) of different lengths are padded
// at the end to the longest with pad_value, as SequenceDataset does.
Batch stack_samples(const std::vector<Batch>& samples, int64_t pad_value) {
  std::vector<at::Tensor> inputs, targets;
  Batch batch;
  bool same_shape = true;
  int64_t longest = 0;
  for (const auto& s : samples) {
    inputs.push_back(s.input);
    targets.push_back(s.target);
    batch.padding += s.padding;
    same_shape = same_shape && s.input.sizes() == samples.front().input.sizes();
    if (s.input.dim() == 2) longest = std::max(longest, s.input.size(1));
  }
  batch.target = at::cat(targets, 0);
  if (same_shape) {
    batch.input = at::cat(inputs, 0);
    return batch;
  }
  const auto n = static_cast<int64_t>(samples.size());
  batch.input = at::full({n, longest}, pad_value, samples.front().input.options());
  for (int64_t row = 0; row < n; ++row) {
    const at::Tensor& input = inputs[row];
    if (input.dim() != 2) throw Error("CachedDataset: samples of different shapes that are not sequences");
    const int64_t length = input.size(1);
    batch.input[row].narrow(0, 0, length).copy_(input[0]);
    batch.padding += longest - length;
  }
  return batch;
}

}  // namespace

CachedDataset::CachedDataset(std::shared_ptr<Dataset> dataset, std::shared_ptr<CacheLoader> loader,
                             CachedDatasetOptions options)
    : dataset_(std::move(dataset)), loader_(std::move(loader)), options_(std::move(options)) {
  if (!dataset_ || !loader_) throw InvalidArgument("CachedDataset: a dataset and a cache loader are needed");
  tag_ = store::fnv1a_64(dataset_->describe() + "\n" + options_.source_identity);
  set_complexities(dataset_->complexities());
  if (dataset_->size() > 0) reference_ = dataset_->load_samples({0});
}

// Same dtypes and shapes as the source's samples; int64 sequences ([1, L],
// the token formats) may differ in L, as the source's own do.
bool CachedDataset::fits_source(const Batch& sample) const {
  if (!reference_.input.defined()) return true;
  const at::Tensor &in = sample.input, &want = reference_.input;
  if (in.scalar_type() != want.scalar_type() || sample.target.scalar_type() != reference_.target.scalar_type() ||
      sample.target.sizes() != reference_.target.sizes() || in.dim() != want.dim()) {
    return false;
  }
  if (in.sizes() == want.sizes()) return true;
  return want.scalar_type() == at::kLong && want.dim() == 2 && in.size(0) == 1;
}

CachedDataset::CachedDataset(std::shared_ptr<Dataset> dataset, CacheOptions cache, CachedDatasetOptions options)
    : CachedDataset(std::move(dataset), std::make_shared<CacheLoader>(std::move(cache)), std::move(options)) {}

Batch CachedDataset::get_batch(const std::vector<int64_t>& indices) const {
  Batch b = load_samples(indices);
  dataset_->finish_samples(b, indices, -1);
  return b;
}

// The cache holds what the source's load_samples() gives: for an image
// folder the decoded pixels before augmentation, so each epoch's
// augmentations (finish_samples()) are drawn afresh.
Batch CachedDataset::load_samples(const std::vector<int64_t>& indices) const {
  data::index_tensor(indices, size());  // range check, as the formats do
  if (indices.empty() || !loader_->available()) return dataset_->load_samples(indices);
  std::vector<std::string> keys;
  keys.reserve(indices.size());
  for (int64_t i : indices) keys.push_back(std::to_string(i));
  std::vector<std::optional<std::string>> values = loader_->lookup(keys);
  std::vector<Batch> samples(indices.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    if (values[k]) {
      data::DecodedSample decoded = data::decode_sample(*values[k], tag_);
      if (decoded.status == data::SampleStatus::kOk && !fits_source(decoded.sample)) {
        decoded.status = data::SampleStatus::kMalformed;
      }
      if (decoded.status == data::SampleStatus::kOk) {
        samples[k] = std::move(decoded.sample);
        continue;
      }
      if (decoded.status == data::SampleStatus::kOtherTag) {
        loader_->warn_once("other-data", "dataset cache '" + loader_->options().dataset_name +
                                             "' holds samples of another data set under the same name; they are "
                                             "replaced by this one's (use another data.cache.dataset_name to keep both)");
      } else {
        loader_->warn_once("malformed", "dataset cache '" + loader_->options().dataset_name + "': entry " +
                                            keys[k] + " is not a sample; decoding it from the source");
      }
    }
    samples[k] = dataset_->load_samples({indices[k]});
    loader_->put(keys[k], data::encode_sample(samples[k], tag_));
  }
  return stack_samples(samples, options_.pad_value);
}

std::string CachedDataset::describe() const {
  return dataset_->describe() + " (cached: " + loader_->describe() + ")";
}

}  // namespace bagua
