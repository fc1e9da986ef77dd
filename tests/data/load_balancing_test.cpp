// The load-balancing samplers: LoadBalancingDistributedSampler against a
// Python transcription of Bagua's algorithm run with Debian's torch (the
// same random streams), the partition and balance properties, the batch
// sampler, make_sampler() and the complexity fields the loaders read.
#include "data/data_test_support.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

namespace bagua {
namespace {

// n samples of one float each, with the given complexities.
class TensorDatasetForTest : public Dataset {
 public:
  TensorDatasetForTest(int64_t n, std::vector<double> complexity) : n_(n) {
    if (!complexity.empty()) set_complexities(std::move(complexity));
  }
  int64_t size() const override { return n_; }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    return {at::zeros({static_cast<int64_t>(indices.size()), 1}), at::zeros({static_cast<int64_t>(indices.size())})};
  }
  std::string describe() const override { return "test"; }
  int64_t num_classes() const override { return 0; }

 private:
  int64_t n_;
};

std::vector<double> random_complexities(int64_t n, int max, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, max);
  std::vector<double> c(n);
  for (auto& v : c) v = d(rng);
  return c;
}

// Long-tailed lengths: most samples short, one in ten very long.
std::vector<double> skewed_lengths(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> shortl(5, 40), longl(200, 1000), pick(0, 9);
  std::vector<double> c(n);
  for (auto& v : c) v = pick(rng) == 0 ? longl(rng) : shortl(rng);
  return c;
}

TEST(LoadBalancingSampler, MatchesBaguasAlgorithmWithTorchsRandomStreams) {
  struct Case {
    int64_t n;
    int replicas;
    bool shuffle;
    uint64_t seed;
    int64_t epoch;
    bool drop_last;
    double level;
  };
  std::vector<Case> all;
  for (int64_t n : {1, 5, 10, 33, 257})
    for (int replicas : {1, 2, 3, 4})
      for (bool drop_last : {false, true}) {
        all.push_back({n, replicas, true, 0, 0, drop_last, 0.0});
        all.push_back({n, replicas, true, 9, 2, drop_last, 0.3});
        all.push_back({n, replicas, false, 1, 1, drop_last, 1.0});
      }
  nlohmann::json spec = nlohmann::json::array();
  std::vector<std::vector<double>> complexity;
  for (size_t i = 0; i < all.size(); ++i) {
    const Case& c = all[i];
    complexity.push_back(random_complexities(c.n, 50, static_cast<uint32_t>(i)));
    std::vector<int64_t> ints(complexity.back().begin(), complexity.back().end());
    spec.push_back({ints, c.replicas, c.shuffle, c.seed, c.epoch, c.drop_last, c.level});
  }
  // The steps of Bagua's shuffle_chunks()/__iter__, written out plainly.
  std::string script =
      "import json, math, torch\n"
      "def bagua(c, R, rank, shuffle, seed, epoch, drop_last, level):\n"
      "    n = len(c)\n"
      "    ns = math.ceil((n - R) / R) if drop_last and n % R else math.ceil(n / R)\n"
      "    rnum = int((max(c) - min(c)) * level + 1)\n"
      "    nchunks = max(1, ns)\n"
      "    if shuffle:\n"
      "        g = torch.Generator(); g.manual_seed(seed + epoch)\n"
      "        noise = torch.randint(rnum, (n,), generator=g).tolist()\n"
      "        key = [c[i] + noise[i] for i in range(n)]\n"
      "        order = sorted(range(n), key=lambda i: key[i])\n"
      "        visit = torch.randperm(nchunks, generator=g).tolist()\n"
      "    else:\n"
      "        order = sorted(range(n), key=lambda i: c[i])\n"
      "        visit = list(range(nchunks))\n"
      "    if drop_last: visit = visit[:ns]\n"
      "    chunks = [[order[(k * R + r) % n] for r in range(R)] for k in range(nchunks)]\n"
      "    return [chunks[k][rank] for k in visit]\n"
      "out = []\n"
      "for c, R, shuffle, seed, epoch, drop_last, level in json.loads('" + spec.dump() + "'):\n"
      "    out.append([bagua(c, R, r, shuffle, seed, epoch, drop_last, level) for r in range(R)])\n"
      "print(json.dumps(out))\n";
  nlohmann::json want = nlohmann::json::parse(testing::run_python(script));
  ASSERT_EQ(want.size(), all.size());
  size_t compared = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const Case& c = all[i];
    for (int rank = 0; rank < c.replicas; ++rank) {
      LoadBalancingDistributedSampler s(complexity[i], c.replicas, rank, c.shuffle, c.seed, c.drop_last, c.level);
      s.set_epoch(c.epoch);
      auto got = s.indices();
      EXPECT_EQ(got, want[i][rank].get<std::vector<int64_t>>()) << "case " << i << " rank " << rank;
      EXPECT_EQ(static_cast<int64_t>(got.size()), s.num_samples());
      ++compared;
    }
  }
  EXPECT_GT(compared, 200u);
}

TEST(LoadBalancingSampler, EverySampleExactlyOncePerEpochAcrossRanks) {
  const int64_t n = 1200;  // divisible by 4: no padding
  auto c = skewed_lengths(n, 3);
  for (double level : {0.0, 0.5, 1.0}) {
    for (int64_t epoch : {0, 1, 7}) {
      std::vector<int64_t> seen;
      for (int rank = 0; rank < 4; ++rank) {
        LoadBalancingDistributedSampler s(c, 4, rank, true, 11, false, level);
        s.set_epoch(epoch);
        auto mine = s.indices();
        EXPECT_EQ(static_cast<int64_t>(mine.size()), n / 4);
        seen.insert(seen.end(), mine.begin(), mine.end());
      }
      std::sort(seen.begin(), seen.end());
      std::vector<int64_t> every(n);
      std::iota(every.begin(), every.end(), 0);
      EXPECT_EQ(seen, every) << "level " << level << " epoch " << epoch;
    }
  }
}

TEST(LoadBalancingSampler, SameOnEveryRankForASeedAndEpochAndNewEachEpoch) {
  auto c = skewed_lengths(500, 4);
  LoadBalancingDistributedSampler a(c, 3, 0, true, 5, false, 0.2), b(c, 3, 2, true, 5, false, 0.2);
  a.set_epoch(4);
  b.set_epoch(4);
  EXPECT_EQ(a.all_indices(), b.all_indices());  // what rank 0 and rank 2 compute of everyone
  EXPECT_EQ(b.indices(), a.all_indices()[2]);
  auto epoch4 = a.indices();
  a.set_epoch(5);
  EXPECT_NE(a.indices(), epoch4);
}

// The spread of a step's total complexity across ranks, relative to the
// mean, averaged over the epoch's steps.
double mean_relative_spread(const std::vector<std::vector<std::vector<int64_t>>>& per_rank,
                            const std::vector<double>& c) {
  double sum = 0;
  size_t steps = per_rank[0].size();
  for (size_t s = 0; s < steps; ++s) {
    double lo = 1e300, hi = 0, total = 0;
    for (const auto& rank : per_rank) {
      double t = 0;
      for (int64_t i : rank[s]) t += c[i];
      lo = std::min(lo, t);
      hi = std::max(hi, t);
      total += t;
    }
    sum += (hi - lo) / (total / static_cast<double>(per_rank.size()));
  }
  return sum / static_cast<double>(steps);
}

TEST(LoadBalancingSampler, StepsAreFarBetterBalancedThanTheDistributedSampler) {
  const int64_t n = 4000;
  const int replicas = 4;
  auto c = skewed_lengths(n, 7);
  DataSpec spec;
  spec.batch_size = 16;
  auto balanced = [&](SamplerType type) {
    spec.sampler.type = type;
    spec.sampler.complexity_field = "length";
    TensorDatasetForTest data(n, c);
    auto sampler = make_sampler(spec, data, replicas);
    std::vector<std::vector<std::vector<int64_t>>> per_rank;
    for (int r = 0; r < replicas; ++r) per_rank.push_back(sampler->batches(0, r));
    return mean_relative_spread(per_rank, c);
  };
  const double distributed = balanced(SamplerType::kDistributed);
  const double load_balancing = balanced(SamplerType::kLoadBalancing);
  // On this data the distributed sampler's ranks differ by about the mean
  // itself each step; the load-balancing ones by a few percent.
  EXPECT_GT(distributed, 0.5);
  EXPECT_LT(load_balancing, 0.05);
  EXPECT_LT(load_balancing * 10, distributed);
  std::printf("mean relative spread of a step's complexity across 4 ranks: distributed %.3f, load_balancing %.3f\n",
              distributed, load_balancing);
}

TEST(LoadBalancingSampler, RefusesBadArguments) {
  EXPECT_THROW(LoadBalancingDistributedSampler({}, 2, 0, true, 0, false, 0), InvalidArgument);
  EXPECT_THROW(LoadBalancingDistributedSampler({1, 2}, 0, 0, true, 0, false, 0), InvalidArgument);
  EXPECT_THROW(LoadBalancingDistributedSampler({1, 2}, 2, 2, true, 0, false, 0), InvalidArgument);
  EXPECT_THROW(LoadBalancingDistributedSampler({1, 2}, 2, 0, true, 0, false, 1.5), InvalidArgument);
  EXPECT_THROW(LoadBalancingDistributedSampler({1, -2}, 2, 0, true, 0, false, 0), InvalidArgument);
  EXPECT_THROW(LoadBalancingDistributedSampler({1, NAN}, 2, 0, true, 0, false, 0), InvalidArgument);
}

TEST(BatchesWithinBudget, CutsWhereTheNextSampleWouldBreakTheBudget) {
  std::vector<double> c{10, 10, 30, 5, 100, 1, 1, 1};
  std::vector<int64_t> idx{0, 1, 2, 3, 4, 5, 6, 7};
  // budget 60: {0,1} (2x10=20; +30 -> 3x30=90 > 60), {2} (2x30 with 5 -> 60 ok) ...
  auto b = batches_within_budget(idx, c, 60, 100);
  std::vector<std::vector<int64_t>> want{{0, 1}, {2, 3}, {4}, {5, 6, 7}};
  EXPECT_EQ(b, want);
  // max_samples caps a batch of cheap samples.
  auto capped = batches_within_budget({5, 6, 7}, c, 1000, 2);
  EXPECT_EQ(capped, (std::vector<std::vector<int64_t>>{{5, 6}, {7}}));
  EXPECT_THROW(batches_within_budget(idx, c, 0, 4), InvalidArgument);
  EXPECT_THROW(batches_within_budget(idx, c, 10, 0), InvalidArgument);
}

TEST(LoadBalancingBatchSampler, EveryRankGetsTheSameNumberOfBatchesWithinTheBudget) {
  const int64_t n = 1001;
  auto c = skewed_lengths(n, 9);
  const double budget = 2000;
  for (bool drop_last : {false, true}) {
    LoadBalancingDistributedSampler s(c, 3, 0, true, 2, false, 0.1);
    LoadBalancingDistributedBatchSampler batches(
        s, [&](const std::vector<int64_t>& idx) { return batches_within_budget(idx, c, budget, 64); }, 0, drop_last);
    batches.set_epoch(3);
    auto all = batches.all_batches();
    ASSERT_EQ(all.size(), 3u);
    std::vector<size_t> unpadded;
    for (int r = 0; r < 3; ++r) {
      LoadBalancingDistributedSampler mine(c, 3, r, true, 2, false, 0.1);
      mine.set_epoch(3);
      unpadded.push_back(batches_within_budget(mine.indices(), c, budget, 64).size());
    }
    const size_t want = drop_last ? *std::min_element(unpadded.begin(), unpadded.end())
                                  : *std::max_element(unpadded.begin(), unpadded.end());
    std::set<int64_t> covered;
    for (const auto& rank : all) {
      EXPECT_EQ(rank.size(), want) << "drop_last " << drop_last;
      for (const auto& batch : rank) {
        ASSERT_FALSE(batch.empty());
        EXPECT_LE(batch.size(), 64u);
        double most = 0;
        for (int64_t i : batch) most = std::max(most, c[i]);
        if (batch.size() > 1) {
          EXPECT_LE(most * static_cast<double>(batch.size()), budget);
        }
        covered.insert(batch.begin(), batch.end());
      }
    }
    if (!drop_last) {
      EXPECT_EQ(covered.size(), static_cast<size_t>(n));  // padding only repeats
    }
    EXPECT_EQ(batches.batches(), all[0]);
  }
  LoadBalancingDistributedSampler dropping(c, 3, 0, true, 2, /*drop_last=*/true, 0);
  EXPECT_THROW(LoadBalancingDistributedBatchSampler(dropping, [](const std::vector<int64_t>& i) {
                 return std::vector<std::vector<int64_t>>{i};
               }, 0),
               InvalidArgument);
}

TEST(MakeSampler, NeedsComplexitiesForLoadBalancingAndDescribesItself) {
  DataSpec spec;
  spec.batch_size = 4;
  spec.sampler.type = SamplerType::kLoadBalancing;
  spec.sampler.complexity_field = "len";
  TensorDatasetForTest without(10, {});
  EXPECT_THROW(make_sampler(spec, without, 2), Error);
  TensorDatasetForTest with(10, random_complexities(10, 9, 1));
  auto s = make_sampler(spec, with, 2);
  EXPECT_NE(s->describe().find("load_balancing sampler on 'len'"), std::string::npos) << s->describe();
  EXPECT_EQ(s->num_batches(0), 2);  // 5 samples per rank in batches of 4
  EXPECT_EQ(s->batches(0, 1), s->batches(0, 1));
  spec.sampler.type = SamplerType::kDistributed;
  auto d = make_sampler(spec, without, 2);
  DistributedSampler ref(10, 2, 1, true, 0, false);
  EXPECT_EQ(d->batches(0, 1), make_batches(ref.indices(), 4));
}

TEST(ComplexityField, JsonlListsCountTheirLengthAndNumbersTheirValue) {
  testing::TempDir dir;
  const std::string path = dir.file("d.jsonl");
  testing::write_file(path,
                      "{\"x\": [1, 2, 3], \"y\": 0, \"cost\": 7}\n"
                      "{\"x\": [4], \"y\": 1, \"cost\": 2.5}\n");
  DataSource src;
  src.format = DataFormat::kJsonl;
  src.path = path;
  src.input_field = "x";
  src.target_field = "y";
  LoadOptions by_length{"x"}, by_value{"cost"}, missing{"nope"};
  EXPECT_EQ(load_dataset(src, TargetKind::kClassIndex, by_length)->complexities(), (std::vector<double>{3, 1}));
  EXPECT_EQ(load_dataset(src, TargetKind::kClassIndex, by_value)->complexities(), (std::vector<double>{7, 2.5}));
  EXPECT_TRUE(load_dataset(src, TargetKind::kClassIndex)->complexities().empty());
  testing::expect_data_error([&] { load_dataset(src, TargetKind::kClassIndex, missing); },
                             {path + ":1: missing field 'nope'"});
  testing::write_file(path, "{\"x\": [1], \"y\": 0, \"cost\": -1}\n");
  testing::expect_data_error([&] { load_dataset(src, TargetKind::kClassIndex, by_value); },
                             {path + ":1: field 'cost'", "must be a number >= 0"});
}

TEST(ComplexityField, CsvColumnByName) {
  testing::TempDir dir;
  const std::string path = dir.file("d.csv");
  testing::write_file(path, "a,len,label\n0.5,3,1\n1.5,9,0\n");
  DataSource src;
  src.format = DataFormat::kCsv;
  src.path = path;
  src.target_column.name = "label";
  auto d = load_dataset(src, TargetKind::kClassIndex, LoadOptions{"len"});
  EXPECT_EQ(d->complexities(), (std::vector<double>{3, 9}));
  testing::expect_data_error([&] { load_dataset(src, TargetKind::kClassIndex, LoadOptions{"size"}); },
                             {path + ":1: complexity_field 'size' is not a column of the header"});
}

TEST(CheckDataset, ReadsOnlyTheStartOfATextFileButLoadingReadsAll) {
  testing::TempDir dir;
  const std::string path = dir.file("big.jsonl");
  std::string text;
  while (text.size() < (3u << 20)) text += "{\"x\": [1, 2, 3, 4, 5, 6, 7, 8], \"y\": 1}\n";
  text += "{\"x\": [1, 2], \"y\": \"oops\"}\n";
  testing::write_file(path, text);
  DataSource src;
  src.format = DataFormat::kJsonl;
  src.path = path;
  src.input_field = "x";
  src.target_field = "y";
  EXPECT_NE(check_dataset(src, TargetKind::kClassIndex).find("jsonl big.jsonl"), std::string::npos);
  EXPECT_THROW(load_dataset(src, TargetKind::kClassIndex), DataError);
}

}  // namespace
}  // namespace bagua

namespace bagua {
namespace {

bool maps_shared_data() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("memfd:bagua-data:") != std::string::npos) return true;
  return false;
}

// The same samples, first, last and between, and the same description.
void expect_same_samples(const Dataset& own, const Dataset& mapped) {
  std::vector<int64_t> idx{0, 1, 9999, 4321};
  Batch a = own.get_batch(idx), b = mapped.get_batch(idx);
  EXPECT_TRUE(at::equal(a.input, b.input));
  EXPECT_TRUE(at::equal(a.target, b.target));
  EXPECT_EQ(own.describe(), mapped.describe());
}

// The launcher's shared copy of IDX images: the check keeps the inflated
// images in a sealed memfd, and a worker's load maps it instead of reading
// the file, with the same batches.
TEST(SharedData, AWorkerMapsTheLaunchersCopyAndGetsTheSameBatches) {
  DataSource src;
  src.format = DataFormat::kIdx;
  src.images = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
  src.labels = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
  auto own = load_dataset(src, TargetKind::kClassIndex);
  ASSERT_FALSE(maps_shared_data());

  SharedData shared;
  check_dataset(src, TargetKind::kClassIndex, {}, &shared);
  const std::string env = shared.env_value();
  ASSERT_NE(env.find(" " + src.images + "\n"), std::string::npos) << env;
  setenv(kSharedDataEnv, env.c_str(), 1);
  auto mapped = load_dataset(src, TargetKind::kClassIndex);
  unsetenv(kSharedDataEnv);
  EXPECT_TRUE(maps_shared_data()) << "the images should be mapped from the shared memfd";
  expect_same_samples(*own, *mapped);
  mapped.reset();
  EXPECT_FALSE(maps_shared_data()) << "the mapping goes with the dataset";
}

// The launcher's own load after its check (the model probe of bagua run's
// preflight): given the SharedData in LoadOptions, it maps the copy the
// check inflated instead of inflating the file again, with the same
// batches, and without BAGUA_SHARED_DATA in its environment.
TEST(SharedData, TheLaunchersLoadAfterItsCheckMapsTheCopyInsteadOfInflatingAgain) {
  DataSource src;
  src.format = DataFormat::kIdx;
  src.images = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
  src.labels = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
  ASSERT_EQ(std::getenv(kSharedDataEnv), nullptr);
  auto own = load_dataset(src, TargetKind::kClassIndex);
  SharedData shared;
  check_dataset(src, TargetKind::kClassIndex, {}, &shared);
  ASSERT_GE(shared.fd_for(src.images), 0);
  EXPECT_EQ(shared.fd_for(src.labels), -1) << "labels are read, not shared";
  ASSERT_FALSE(maps_shared_data());
  LoadOptions options;
  options.shared = &shared;
  auto mapped = load_dataset(src, TargetKind::kClassIndex, options);
  EXPECT_TRUE(maps_shared_data()) << "the images should be mapped from the check's memfd";
  expect_same_samples(*own, *mapped);
  mapped.reset();
  EXPECT_FALSE(maps_shared_data());
}

}  // namespace
}  // namespace bagua
