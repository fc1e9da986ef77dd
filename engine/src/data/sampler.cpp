// make_sampler(): the recipe's data.sampler as the trainer's Sampler.
#include <bagua/data.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <stdexcept>

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

// DistributedSampler's order, cut into steps of a global batch.
//
// An epoch's order is DistributedSampler's: a permutation drawn from
// seed + epoch (or 0..n-1), padded by repeating it from its start to a
// multiple of the world size, or cut to one with drop_last. Step k takes
// the slots [kG, (k+1)G) of it and rank r the slots of that chunk whose
// offset in it is r modulo the world size. With G = batch x world that is
// exactly DistributedSampler's rank r list cut into batches of batch
// (tests/data/sampler_test.cpp holds them equal); a G the world size does
// not divide gives the first G mod world ranks one sample more.
//
// After start_epoch_at(e, start), epoch e's order is that permutation
// from position `start` on, padded or cut the same way: a resume at
// another size continues where the run that saved stopped, with no sample
// of the epoch seen twice or skipped (but for the padding, as always).
class DistributedBatches : public Sampler {
 public:
  DistributedBatches(const DataSpec& spec, int64_t size, int replicas, int64_t global_batch)
      : spec_(spec.sampler), size_(size), replicas_(replicas) {
    if (spec.batch_size < 1) throw InvalidArgument("make_sampler: batch_size must be at least 1");
    global_ = global_batch > 0 ? global_batch : spec.batch_size * replicas;
    if (global_ < replicas_) {
      throw Error("train.global_batch_size is " + std::to_string(global_) + ", fewer samples than the " +
                      std::to_string(replicas_) + " workers: every worker needs at least one sample a step",
                  true);
    }
  }

  std::vector<std::vector<int64_t>> batches(int64_t epoch, int rank) const override {
    const auto list = batch_list(epoch, rank);
    std::vector<std::vector<int64_t>> out;
    out.reserve(static_cast<size_t>(list->size()));
    for (int64_t b = 0; b < list->size(); ++b) out.push_back(list->at(b));
    return out;
  }
  std::shared_ptr<const BatchList> batch_list(int64_t epoch, int rank) const override {
    auto list = std::make_shared<Lazy>();
    list->order = epoch_order(epoch);
    list->shuffle = spec_.shuffle;
    list->key = spec_.seed + static_cast<uint64_t>(epoch);
    list->samples = size_;
    list->begin = start_of(epoch);
    list->rest = size_ - list->begin;
    list->slots = slots_of(list->rest);
    list->global = global_;
    list->replicas = replicas_;
    list->rank = rank;
    return list;
  }
  int64_t num_batches(int64_t epoch) const override {
    return (slots_of(size_ - start_of(epoch)) + global_ - 1) / global_;
  }
  int64_t samples_per_rank(int64_t epoch) const override {
    return (slots_of(size_ - start_of(epoch)) + replicas_ - 1) / replicas_;
  }
  std::string describe() const override { return "distributed sampler (" + flags(spec_) + ")"; }

  bool can_reshard() const override { return true; }
  void start_epoch_at(int64_t epoch, int64_t start) override {
    if (start < 0 || start > size_) {
      throw Error("resume position " + std::to_string(start) + " is outside the epoch's " + std::to_string(size_) +
                      " samples",
                  true);
    }
    start_epoch_ = epoch;
    start_ = start;
  }
  std::optional<int64_t> position(int64_t epoch, int64_t batches) const override {
    const int64_t begin = start_of(epoch);
    if (batches >= num_batches(epoch)) return size_;  // the epoch is over (a dropped tail too)
    return begin + batches * global_;
  }
  int64_t global_batch() const override { return global_; }
  double loss_weight(int64_t epoch, int64_t b, int rank) const override {
    const int64_t len = std::min(global_, slots_of(size_ - start_of(epoch)) - b * global_);
    if (len <= 0 || len % replicas_ == 0) return 1.0;
    const int64_t mine = len / replicas_ + (rank < len % replicas_ ? 1 : 0);
    return static_cast<double>(mine * replicas_) / static_cast<double>(len);
  }

 private:
  int64_t start_of(int64_t epoch) const { return epoch == start_epoch_ ? start_ : 0; }
  // Slots of an order of `rest` samples: whole steps, then a last one
  // padded to a multiple of the world size (or cut to one with drop_last),
  // so that every rank has a sample in every step; unpadded when padding
  // would make it longer than a step (a global batch the world size does
  // not divide, where it is at least the world size anyway). With a global
  // batch the world size divides, that is DistributedSampler's total_size.
  int64_t slots_of(int64_t rest) const {
    if (rest <= 0) return 0;
    const int64_t whole = rest / global_ * global_, last = rest - whole;
    if (spec_.drop_last) return whole + last / replicas_ * replicas_;
    const int64_t padded = (last + replicas_ - 1) / replicas_ * replicas_;
    return whole + (padded <= global_ ? padded : last);
  }
  // The epoch's order as randperm gives it (int32: the same permutation
  // in half the memory), or none: in order, or above
  // kMaterializedOrderLimit samples, where the order is keyed_permutation's,
  // computed per position, so the order of a streamed set of any size
  // costs no memory.
  at::Tensor epoch_order(int64_t epoch) const {
    if (!spec_.shuffle || size_ > kMaterializedOrderLimit) return {};
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(spec_.seed + static_cast<uint64_t>(epoch));
    return at::randperm(size_, g, at::TensorOptions().dtype(at::kInt)).contiguous();
  }

  // Step k takes the slots [kG, (k+1)G) of the order from `begin` on, rank
  // r those at offsets r, r + world, ... (see the class comment).
  struct Lazy : BatchList {
    at::Tensor order;  // int32, or undefined (identity or keyed)
    bool shuffle = false;
    uint64_t key = 0;
    int64_t samples = 0, begin = 0, rest = 0, slots = 0, global = 1;
    int replicas = 1, rank = 0;

    int64_t size() const override { return (slots + global - 1) / global; }
    std::vector<int64_t> at(int64_t b) const override {
      if (b < 0 || b >= size()) throw std::out_of_range("batch " + std::to_string(b) + " of " + std::to_string(size()));
      const int64_t c = b * global, len = std::min(global, slots - c);
      std::vector<int64_t> batch;
      batch.reserve(static_cast<size_t>((len + replicas - 1) / replicas));
      const int32_t* o = order.defined() ? order.data_ptr<int32_t>() : nullptr;
      for (int64_t p = c + rank; p < c + len; p += replicas) {
        const int64_t q = begin + p % rest;
        batch.push_back(o ? static_cast<int64_t>(o[q]) : shuffle ? keyed_permutation(samples, key, q) : q);
      }
      return batch;
    }
  };

  SamplerSpec spec_;
  int64_t size_;
  int replicas_;
  int64_t global_ = 0;
  int64_t start_epoch_ = -1, start_ = 0;
};

// LoadBalancingDistributedSampler, batches of batch_size or within a budget.
class LoadBalancingBatches : public Sampler {
 public:
  LoadBalancingBatches(const DataSpec& spec, const std::vector<double>& complexity, int replicas,
                       int64_t global_batch)
      : spec_(spec.sampler), complexity_(complexity), replicas_(replicas), batch_(spec.batch_size) {
    if (batch_ < 1) throw InvalidArgument("make_sampler: batch_size must be at least 1");
    if (global_batch > 0) {
      if (global_batch % replicas_ != 0) {
        throw Error("train.global_batch_size " + std::to_string(global_batch) + " does not divide among " +
                        std::to_string(replicas_) +
                        " workers, which the load_balancing sampler needs (its ranks' batches must match in size); "
                        "use a world size that divides it, or the distributed sampler",
                    true);
      }
      batch_ = global_batch / replicas_;
    }
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

  int64_t global_batch() const override { return batch_ * replicas_; }

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

void Sampler::start_epoch_at(int64_t epoch, int64_t start) {
  if (start == 0) return;
  throw Error("this " + describe() + " cannot continue epoch " + std::to_string(epoch + 1) +
                  " at another world size or batch size: its batches are cut per rank, so the part of the epoch "
                  "already seen does not carry over. Resume with the checkpoint's world size and batch size, or "
                  "from a checkpoint written at an epoch's end (checkpoint.every_steps: null)",
              true);
}

std::optional<int64_t> Sampler::position(int64_t, int64_t) const { return std::nullopt; }

std::shared_ptr<const BatchList> batch_list_of(std::vector<std::vector<int64_t>> batches) {
  struct Held : BatchList {
    std::vector<std::vector<int64_t>> batches;
    int64_t size() const override { return static_cast<int64_t>(batches.size()); }
    std::vector<int64_t> at(int64_t b) const override {
      if (b < 0 || b >= size()) throw std::out_of_range("batch " + std::to_string(b) + " of " + std::to_string(size()));
      return batches[static_cast<size_t>(b)];
    }
  };
  auto held = std::make_shared<Held>();
  held->batches = std::move(batches);
  return held;
}

namespace {
// SplitMix64's finaliser: a well-mixed 64-bit function of its input.
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

int64_t keyed_permutation(int64_t n, uint64_t key, int64_t p) {
  if (n <= 0 || p < 0 || p >= n) throw InvalidArgument("keyed_permutation: position " + std::to_string(p) +
                                                       " outside [0, " + std::to_string(n) + ")");
  int half = 1;  // bits in each half of the domain 4^half >= n
  while ((uint64_t{1} << (2 * half)) < static_cast<uint64_t>(n)) ++half;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  uint64_t x = static_cast<uint64_t>(p);
  do {  // cycle-walking: a permutation of the domain, restricted to [0, n)
    uint64_t left = x >> half, right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t next = left ^ (mix(key * 0x100000001b3ULL + round * 0x9e3779b97f4a7c15ULL + right) & mask);
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= static_cast<uint64_t>(n));
  return static_cast<int64_t>(x);
}

std::unique_ptr<Sampler> make_sampler(const DataSpec& spec, const Dataset& train, int num_replicas,
                                      int64_t global_batch) {
  switch (spec.sampler.type) {
    case SamplerType::kDistributed:
      return std::make_unique<DistributedBatches>(spec, train.size(), num_replicas, global_batch);
    case SamplerType::kLoadBalancing:
      if (train.complexities().size() != static_cast<size_t>(train.size()))
        throw Error("data.sampler: the load_balancing sampler needs each sample's '" + spec.sampler.complexity_field +
                        "', but the training set was loaded without it",
                    false);
      return std::make_unique<LoadBalancingBatches>(spec, train.complexities(), num_replicas, global_batch);
  }
  throw Error("make_sampler: unknown sampler type", false);
}

LoadOptions load_options_for(const DataSpec& spec) {
  LoadOptions o;
  if (spec.sampler.type == SamplerType::kLoadBalancing) o.complexity_field = spec.sampler.complexity_field;
  o.augment = true;
  o.augment_seed = spec.sampler.seed;
  return o;
}

LoadOptions eval_load_options_for(const DataSpec& spec) {
  LoadOptions o;
  if (spec.sampler.type == SamplerType::kLoadBalancing) o.sampler_column = spec.sampler.complexity_field;
  return o;
}

}  // namespace bagua
