// DistributedSampler and make_batches, following
// torch/utils/data/distributed.py step by step so the indices are the same.
#include <bagua/data.h>

#include <ATen/CPUGeneratorImpl.h>

namespace bagua {

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (num_replicas < 1)
    throw InvalidArgument("DistributedSampler: num_replicas must be at least 1, got " +
                          std::to_string(num_replicas));
  if (rank < 0 || rank >= num_replicas)
    throw InvalidArgument("DistributedSampler: invalid rank " + std::to_string(rank) +
                          ", rank should be in the interval [0, " +
                          std::to_string(num_replicas - 1) + "]");
  if (dataset_size < 0)
    throw InvalidArgument("DistributedSampler: negative dataset size " + std::to_string(dataset_size));
  // Python: with drop_last and a remainder, ceil((n - r) / r), which is
  // floor(n / r) (also when n < r); otherwise ceil(n / r).
  if (drop_last && dataset_size % num_replicas != 0)
    num_samples_ = dataset_size / num_replicas;
  else
    num_samples_ = (dataset_size + num_replicas - 1) / num_replicas;
}

void DistributedSampler::set_epoch(int64_t epoch) { epoch_ = epoch; }

std::vector<int64_t> DistributedSampler::indices() const { return indices_for(rank_); }

std::vector<int64_t> DistributedSampler::indices_for(int rank) const {
  if (rank < 0 || rank >= num_replicas_)
    throw InvalidArgument("DistributedSampler: invalid rank " + std::to_string(rank));
  std::vector<int64_t> order;
  if (shuffle_) {
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed_ + static_cast<uint64_t>(epoch_));
    at::Tensor perm = at::randperm(dataset_size_, g, at::TensorOptions().dtype(at::kLong)).contiguous();
    const int64_t* p = perm.data_ptr<int64_t>();
    order.assign(p, p + dataset_size_);
  } else {
    order.resize(dataset_size_);
    for (int64_t i = 0; i < dataset_size_; ++i) order[i] = i;
  }
  const int64_t total = total_size();
  if (!drop_last_) {
    // Pad by repeating the list from its start (several times if needed).
    int64_t n = static_cast<int64_t>(order.size());
    for (int64_t i = 0; static_cast<int64_t>(order.size()) < total; ++i) order.push_back(order[i % n]);
  } else {
    order.resize(total);
  }
  std::vector<int64_t> mine;
  mine.reserve(num_samples_);
  for (int64_t i = rank; i < total; i += num_replicas_) mine.push_back(order[i]);
  return mine;
}

std::vector<std::vector<int64_t>> make_batches(const std::vector<int64_t>& indices,
                                               int64_t batch_size, bool drop_last) {
  if (batch_size < 1)
    throw InvalidArgument("make_batches: batch_size must be at least 1, got " + std::to_string(batch_size));
  std::vector<std::vector<int64_t>> batches;
  for (size_t start = 0; start < indices.size(); start += batch_size) {
    size_t end = std::min(indices.size(), start + static_cast<size_t>(batch_size));
    if (drop_last && end - start < static_cast<size_t>(batch_size)) break;
    batches.emplace_back(indices.begin() + start, indices.begin() + end);
  }
  return batches;
}

}  // namespace bagua
