// make_sampler(): the recipe's data.sampler as the trainer's Sampler.
#include <bagua/data.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>

#include <iomanip>
#include <sstream>

namespace bagua {
namespace {

std::string flags(const SamplerSpec& s) {
  std::ostringstream out;
  out << (s.shuffle ? "shuffled, seed " + std::to_string(s.seed) : std::string("in order"))
      << (s.drop_last ? ", drop_last" : "");
  return out.str();
}

// DistributedSampler, batches of batch_size.
class DistributedBatches : public Sampler {
 public:
  DistributedBatches(const DataSpec& spec, int64_t size, int replicas)
      : spec_(spec.sampler), size_(size), replicas_(replicas), batch_(spec.batch_size) {
    if (batch_ < 1) throw InvalidArgument("make_sampler: batch_size must be at least 1");
    DistributedSampler probe(size_, replicas_, 0, spec_.shuffle, spec_.seed, spec_.drop_last);
    per_rank_ = probe.num_samples();
  }
  std::vector<std::vector<int64_t>> batches(int64_t epoch, int rank) const override {
    DistributedSampler s(size_, replicas_, rank, spec_.shuffle, spec_.seed, spec_.drop_last);
    s.set_epoch(epoch);
    return make_batches(s.indices(), batch_);
  }
  int64_t num_batches(int64_t) const override { return (per_rank_ + batch_ - 1) / batch_; }
  int64_t samples_per_rank(int64_t) const override { return per_rank_; }
  std::string describe() const override { return "distributed sampler (" + flags(spec_) + ")"; }

 private:
  SamplerSpec spec_;
  int64_t size_;
  int replicas_;
  int64_t batch_;
  int64_t per_rank_ = 0;
};

// LoadBalancingDistributedSampler, batches of batch_size or within a budget.
class LoadBalancingBatches : public Sampler {
 public:
  LoadBalancingBatches(const DataSpec& spec, const std::vector<double>& complexity, int replicas)
      : spec_(spec.sampler), complexity_(complexity), replicas_(replicas), batch_(spec.batch_size) {
    if (batch_ < 1) throw InvalidArgument("make_sampler: batch_size must be at least 1");
    per_rank_ = sampler(0).num_samples();
  }

  std::vector<std::vector<int64_t>> batches(int64_t epoch, int rank) const override {
    if (!spec_.batch_complexity) {
      LoadBalancingDistributedSampler s = sampler(rank);
      s.set_epoch(epoch);
      return make_batches(s.indices(), batch_);
    }
    auto mine = batch_sampler(epoch, rank).batches();
    if (!spec_.shuffle) return mine;
    // The batches were cut from the rank's samples sorted by complexity:
    // visit them in an order drawn from seed + epoch, the same on every
    // rank, so the k-th batches of all ranks still match.
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(spec_.seed + static_cast<uint64_t>(epoch));
    const int64_t n = static_cast<int64_t>(mine.size());
    at::Tensor perm = at::randperm(n, g, at::TensorOptions().dtype(at::kLong)).contiguous();
    std::vector<std::vector<int64_t>> out;
    out.reserve(mine.size());
    for (int64_t i = 0; i < n; ++i) out.push_back(std::move(mine[perm.data_ptr<int64_t>()[i]]));
    return out;
  }

  int64_t num_batches(int64_t epoch) const override {
    if (!spec_.batch_complexity) return (per_rank_ + batch_ - 1) / batch_;
    return static_cast<int64_t>(batch_sampler(epoch, 0).batches().size());
  }

  int64_t samples_per_rank(int64_t epoch) const override {
    if (!spec_.batch_complexity) return per_rank_;
    int64_t n = 0;
    for (const auto& b : batch_sampler(epoch, 0).batches()) n += static_cast<int64_t>(b.size());
    return n;
  }

  std::string describe() const override {
    std::ostringstream out;
    out << "load_balancing sampler on '" << spec_.complexity_field << "' (" << flags(spec_)
        << ", random_level " << spec_.random_level;
    if (spec_.batch_complexity) out << ", batches within " << *spec_.batch_complexity << " complexity";
    out << ")";
    return out.str();
  }

 private:
  LoadBalancingDistributedSampler sampler(int rank) const {
    // The batch sampler pads batches itself: its sampler never drops.
    const bool drop = spec_.batch_complexity ? false : spec_.drop_last;
    return LoadBalancingDistributedSampler(complexity_, replicas_, rank, spec_.shuffle, spec_.seed, drop,
                                           spec_.random_level);
  }
  LoadBalancingDistributedBatchSampler batch_sampler(int64_t epoch, int rank) const {
    LoadBalancingDistributedSampler s = sampler(rank);
    s.set_epoch(epoch);
    const double budget = static_cast<double>(*spec_.batch_complexity);
    const int64_t most = batch_;
    const std::vector<double>& c = complexity_;
    // Sorted by complexity before cutting, a batch holds samples of about
    // one complexity (sequences of about one length: little padding).
    // Every rank's list holds one sample of each chunk, so the ranks'
    // sorted lists, and their batches, still match step by step.
    auto batch_fn = [&c, budget, most](const std::vector<int64_t>& idx) {
      std::vector<int64_t> sorted = idx;
      std::stable_sort(sorted.begin(), sorted.end(), [&c](int64_t a, int64_t b) { return c[a] < c[b]; });
      return batches_within_budget(sorted, c, budget, most);
    };
    return LoadBalancingDistributedBatchSampler(std::move(s), batch_fn, rank, spec_.drop_last);
  }

  SamplerSpec spec_;
  std::vector<double> complexity_;
  int replicas_;
  int64_t batch_;
  int64_t per_rank_ = 0;
};

}  // namespace

std::unique_ptr<Sampler> make_sampler(const DataSpec& spec, const Dataset& train, int num_replicas) {
  switch (spec.sampler.type) {
    case SamplerType::kDistributed:
      return std::make_unique<DistributedBatches>(spec, train.size(), num_replicas);
    case SamplerType::kLoadBalancing:
      if (train.complexities().size() != static_cast<size_t>(train.size()))
        throw Error("data.sampler: the load_balancing sampler needs each sample's '" + spec.sampler.complexity_field +
                        "', but the training set was loaded without it",
                    false);
      return std::make_unique<LoadBalancingBatches>(spec, train.complexities(), num_replicas);
  }
  throw Error("make_sampler: unknown sampler type", false);
}

LoadOptions load_options_for(const DataSpec& spec) {
  LoadOptions o;
  if (spec.sampler.type == SamplerType::kLoadBalancing) o.complexity_field = spec.sampler.complexity_field;
  return o;
}

}  // namespace bagua
