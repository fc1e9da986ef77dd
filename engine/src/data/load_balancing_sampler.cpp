// LoadBalancingDistributedSampler and its batch sampler, in the order of
// operations of Bagua's contrib/load_balancing_data_loader.py, so the same
// complexities, seed and epoch give the same indices as Bagua with the same
// LibTorch (tests/data/sampler_test.cpp compares the two).
#include <bagua/data.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace bagua {

LoadBalancingDistributedSampler::LoadBalancingDistributedSampler(std::vector<double> complexity, int num_replicas,
                                                                 int rank, bool shuffle, uint64_t seed,
                                                                 bool drop_last, double random_level)
    : complexity_(std::move(complexity)),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  const std::string who = "LoadBalancingDistributedSampler: ";
  if (num_replicas < 1)
    throw InvalidArgument(who + "num_replicas must be at least 1, got " + std::to_string(num_replicas));
  if (rank < 0 || rank >= num_replicas)
    throw InvalidArgument(who + "invalid rank " + std::to_string(rank) + ", rank should be in the interval [0, " +
                          std::to_string(num_replicas - 1) + "]");
  if (complexity_.empty()) throw InvalidArgument(who + "the dataset is empty");
  if (!(random_level >= 0.0 && random_level <= 1.0))
    throw InvalidArgument(who + "random_level must be in [0, 1], got " + std::to_string(random_level));
  for (size_t i = 0; i < complexity_.size(); ++i) {
    if (!std::isfinite(complexity_[i]) || complexity_[i] < 0)
      throw InvalidArgument(who + "sample " + std::to_string(i) + " has complexity " +
                            std::to_string(complexity_[i]) + "; expected a finite number >= 0");
  }
  const int64_t n = static_cast<int64_t>(complexity_.size());
  // As DistributedSampler: floor with drop_last and a remainder, else ceil.
  num_samples_ = (drop_last && n % num_replicas != 0) ? n / num_replicas : (n + num_replicas - 1) / num_replicas;
  const auto [lo, hi] = std::minmax_element(complexity_.begin(), complexity_.end());
  // Python: int((max - min) * random_level + 1), truncated toward zero.
  random_number_ = static_cast<int64_t>((*hi - *lo) * random_level + 1.0);
}

std::vector<std::vector<int64_t>> LoadBalancingDistributedSampler::all_indices() const {
  const int64_t n = static_cast<int64_t>(complexity_.size());
  std::vector<double> keyed = complexity_;
  std::vector<int64_t> chunk_order;
  const int64_t num_chunks = std::max<int64_t>(1, num_samples_);
  if (shuffle_) {
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed_ + static_cast<uint64_t>(epoch_));
    // random_number_ >= 1 always, so the draw always happens (with 1 it
    // adds zeros but still advances the generator, as in Bagua).
    at::Tensor noise = at::randint(random_number_, {n}, g, at::TensorOptions().dtype(at::kLong)).contiguous();
    const int64_t* v = noise.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) keyed[i] += static_cast<double>(v[i]);
    at::Tensor perm = at::randperm(num_chunks, g, at::TensorOptions().dtype(at::kLong)).contiguous();
    const int64_t* p = perm.data_ptr<int64_t>();
    chunk_order.assign(p, p + num_chunks);
  } else {
    chunk_order.resize(num_chunks);
    std::iota(chunk_order.begin(), chunk_order.end(), 0);
  }
  std::vector<int64_t> sorted(n);
  std::iota(sorted.begin(), sorted.end(), 0);
  std::stable_sort(sorted.begin(), sorted.end(), [&](int64_t a, int64_t b) { return keyed[a] < keyed[b]; });
  // Chunk c holds sorted[(c * R + r) % n] for r in [0, R); padding or
  // dropping only ever concerns chunk_order, which already has
  // num_samples entries (or 1 when num_samples is 0, then cut to 0).
  if (drop_last_) chunk_order.resize(static_cast<size_t>(num_samples_));
  std::vector<std::vector<int64_t>> out(num_replicas_);
  for (int r = 0; r < num_replicas_; ++r) {
    out[r].reserve(chunk_order.size());
    for (int64_t c : chunk_order) out[r].push_back(sorted[(c * num_replicas_ + r) % n]);
  }
  return out;
}

std::vector<int64_t> LoadBalancingDistributedSampler::indices_for(int rank) const {
  if (rank < 0 || rank >= num_replicas_)
    throw InvalidArgument("LoadBalancingDistributedSampler: invalid rank " + std::to_string(rank));
  return all_indices()[rank];
}

LoadBalancingDistributedBatchSampler::LoadBalancingDistributedBatchSampler(LoadBalancingDistributedSampler sampler,
                                                                           BatchFn batch_fn, int rank, bool drop_last)
    : sampler_(std::move(sampler)), batch_fn_(std::move(batch_fn)), rank_(rank), drop_last_(drop_last) {
  if (sampler_.drop_last())
    throw InvalidArgument("LoadBalancingDistributedBatchSampler: drop_last of the sampler must be false");
  if (!batch_fn_) throw InvalidArgument("LoadBalancingDistributedBatchSampler: batch_fn is empty");
  if (rank < 0 || rank >= sampler_.num_replicas())
    throw InvalidArgument("LoadBalancingDistributedBatchSampler: invalid rank " + std::to_string(rank));
}

std::vector<std::vector<std::vector<int64_t>>> LoadBalancingDistributedBatchSampler::all_batches() const {
  std::vector<std::vector<std::vector<int64_t>>> per_rank;
  for (const auto& indices : sampler_.all_indices()) per_rank.push_back(batch_fn_(indices));
  size_t target = per_rank[0].size();
  for (const auto& b : per_rank) target = drop_last_ ? std::min(target, b.size()) : std::max(target, b.size());
  for (auto& b : per_rank) {
    if (b.size() > target) {
      b.resize(target);
    } else if (b.size() < target) {
      // Bagua appends batch[:target - len]; cycling also covers a rank
      // with fewer than half the batches of the longest, where a single
      // slice would leave the ranks with different counts.
      if (b.empty()) throw Error("LoadBalancingDistributedBatchSampler: batch_fn gave a rank no batch", false);
      const size_t have = b.size();
      for (size_t i = 0; b.size() < target; ++i) b.push_back(b[i % have]);
    }
  }
  return per_rank;
}

std::vector<std::vector<int64_t>> batches_within_budget(const std::vector<int64_t>& indices,
                                                        const std::vector<double>& complexity, double budget,
                                                        int64_t max_samples) {
  if (!(budget >= 1)) throw InvalidArgument("batches_within_budget: budget must be at least 1");
  if (max_samples < 1) throw InvalidArgument("batches_within_budget: max_samples must be at least 1");
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> current;
  double largest = 0;
  for (int64_t i : indices) {
    if (i < 0 || static_cast<size_t>(i) >= complexity.size())
      throw InvalidArgument("batches_within_budget: index " + std::to_string(i) + " has no complexity");
    const double c = complexity[i];
    const double grown = std::max(largest, c);
    if (!current.empty() && (static_cast<int64_t>(current.size()) >= max_samples ||
                             static_cast<double>(current.size() + 1) * grown > budget)) {
      out.push_back(std::move(current));
      current.clear();
      largest = 0;
    }
    current.push_back(i);
    largest = std::max(largest, c);
  }
  if (!current.empty()) out.push_back(std::move(current));
  return out;
}

}  // namespace bagua
