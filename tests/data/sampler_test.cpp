// DistributedSampler against Python's torch.utils.data.DistributedSampler
// (Debian's python3-torch, the same LibTorch build), and make_batches.
#include "data/data_test_support.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

namespace bagua {
namespace {

struct Case {
  int64_t n;
  int replicas;
  bool shuffle;
  uint64_t seed;
  int64_t epoch;
  bool drop_last;
};

std::vector<Case> cases() {
  std::vector<Case> all;
  for (int64_t n : {1, 2, 3, 7, 10, 11, 100, 1001})
    for (int replicas : {1, 2, 3, 4, 8})
      for (bool drop_last : {false, true}) {
        all.push_back({n, replicas, true, 0, 0, drop_last});
        all.push_back({n, replicas, true, 42, 3, drop_last});
        all.push_back({n, replicas, false, 7, 1, drop_last});
      }
  all.push_back({60000, 2, true, 1234, 9, false});
  all.push_back({60000, 3, true, 1ull << 40, 2, true});
  all.push_back({0, 2, true, 0, 0, false});
  return all;
}

TEST(DistributedSampler, MatchesPyTorchExactly) {
  std::vector<Case> all = cases();
  nlohmann::json spec = nlohmann::json::array();
  for (const Case& c : all)
    spec.push_back({c.n, c.replicas, c.shuffle, c.seed, c.epoch, c.drop_last});
  std::string script =
      "import json, sys\n"
      "from torch.utils.data import DistributedSampler\n"
      "out = []\n"
      "for n, replicas, shuffle, seed, epoch, drop_last in json.loads('" + spec.dump() + "'):\n"
      "    per_rank = []\n"
      "    for rank in range(replicas):\n"
      "        s = DistributedSampler(range(n), num_replicas=replicas, rank=rank, shuffle=shuffle,\n"
      "                               seed=seed, drop_last=drop_last)\n"
      "        s.set_epoch(epoch)\n"
      "        per_rank.append({'len': len(s), 'indices': list(s)})\n"
      "    out.append(per_rank)\n"
      "print(json.dumps(out))\n";
  nlohmann::json want = nlohmann::json::parse(testing::run_python(script));
  ASSERT_EQ(want.size(), all.size());
  size_t compared = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const Case& c = all[i];
    for (int rank = 0; rank < c.replicas; ++rank) {
      DistributedSampler sampler(c.n, c.replicas, rank, c.shuffle, c.seed, c.drop_last);
      sampler.set_epoch(c.epoch);
      std::string what = "n=" + std::to_string(c.n) + " replicas=" + std::to_string(c.replicas) +
                         " rank=" + std::to_string(rank) + " shuffle=" + std::to_string(c.shuffle) +
                         " seed=" + std::to_string(c.seed) + " epoch=" + std::to_string(c.epoch) +
                         " drop_last=" + std::to_string(c.drop_last);
      EXPECT_EQ(sampler.num_samples(), want[i][rank]["len"].get<int64_t>()) << what;
      std::vector<int64_t> got = sampler.indices();
      EXPECT_EQ(got, want[i][rank]["indices"].get<std::vector<int64_t>>()) << what;
      EXPECT_EQ(static_cast<int64_t>(got.size()), sampler.num_samples()) << what;
      ++compared;
    }
  }
  EXPECT_GT(compared, 300u);
}

TEST(DistributedSampler, EpochChangesTheOrderAndRanksPartitionIt) {
  const int64_t n = 1000;
  std::vector<int64_t> seen;
  for (int rank = 0; rank < 4; ++rank) {
    DistributedSampler s(n, 4, rank, true, 5, false);
    s.set_epoch(1);
    auto e1 = s.indices();
    s.set_epoch(2);
    EXPECT_NE(e1, s.indices());
    seen.insert(seen.end(), e1.begin(), e1.end());
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> all(n);
  for (int64_t i = 0; i < n; ++i) all[i] = i;
  EXPECT_EQ(seen, all);  // n divisible by 4: every index exactly once
}

TEST(DistributedSampler, RejectsBadArguments) {
  EXPECT_THROW(DistributedSampler(10, 0, 0, true, 0, false), InvalidArgument);
  EXPECT_THROW(DistributedSampler(10, 2, 2, true, 0, false), InvalidArgument);
  EXPECT_THROW(DistributedSampler(10, 2, -1, true, 0, false), InvalidArgument);
  EXPECT_THROW(DistributedSampler(-1, 2, 0, true, 0, false), InvalidArgument);
}

TEST(MakeBatches, SplitsInOrderWithAShortLastBatch) {
  std::vector<int64_t> idx{9, 8, 7, 6, 5, 4, 3};
  auto b = make_batches(idx, 3);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], (std::vector<int64_t>{9, 8, 7}));
  EXPECT_EQ(b[1], (std::vector<int64_t>{6, 5, 4}));
  EXPECT_EQ(b[2], (std::vector<int64_t>{3}));
  auto d = make_batches(idx, 3, /*drop_last=*/true);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[1], (std::vector<int64_t>{6, 5, 4}));
  EXPECT_EQ(make_batches(idx, 7, true).size(), 1u);
  EXPECT_TRUE(make_batches({}, 4).empty());
  EXPECT_THROW(make_batches(idx, 0), InvalidArgument);
}

// A dataset of n samples that holds nothing: the sampler only asks its size.
class SizedOnly : public Dataset {
 public:
  explicit SizedOnly(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  Batch get_batch(const std::vector<int64_t>&) const override { return {}; }
  std::string describe() const override { return "sized"; }
  int64_t num_classes() const override { return 0; }

 private:
  int64_t n_;
};

DataSpec spec_of(int64_t batch, bool shuffle, bool drop_last) {
  DataSpec spec;
  spec.batch_size = batch;
  spec.sampler.shuffle = shuffle;
  spec.sampler.seed = 11;
  spec.sampler.drop_last = drop_last;
  return spec;
}

// The trainer's distributed sampler cuts steps of a global batch from the
// epoch's order; at batch x world it must give exactly DistributedSampler's
// lists cut into batches (PyTorch's, by the test above).
TEST(SamplerSteps, AtBatchTimesWorldTheyAreDistributedSamplersBatches) {
  int compared = 0;
  for (int64_t n : {1, 7, 10, 100, 1001})
    for (int world : {1, 2, 3, 4})
      for (int64_t batch : {1, 3, 16})
        for (bool drop_last : {false, true})
          for (bool shuffle : {false, true}) {
            SizedOnly data(n);
            auto sampler = make_sampler(spec_of(batch, shuffle, drop_last), data, world);
            EXPECT_EQ(sampler->global_batch(), batch * world);
            for (int64_t epoch : {0, 2}) {
              for (int rank = 0; rank < world; ++rank) {
                DistributedSampler ref(n, world, rank, shuffle, 11, drop_last);
                ref.set_epoch(epoch);
                auto want = make_batches(ref.indices(), batch);
                auto got = sampler->batches(epoch, rank);
                ASSERT_EQ(got, want) << "n=" << n << " world=" << world << " batch=" << batch << " rank=" << rank;
                ASSERT_EQ(static_cast<int64_t>(got.size()), sampler->num_batches(epoch));
                for (size_t b = 0; b < got.size(); ++b) ASSERT_EQ(sampler->loss_weight(epoch, b, rank), 1.0);
                ++compared;
              }
            }
          }
  EXPECT_GT(compared, 1000);
}

// Every sample of the epoch `epoch` in the steps from position `start` on
// with `world` ranks, counted.
std::map<int64_t, int> seen_from(const Sampler& sampler, int64_t epoch, int world) {
  std::map<int64_t, int> seen;
  for (int rank = 0; rank < world; ++rank) {
    for (const auto& batch : sampler.batches(epoch, rank)) {
      EXPECT_FALSE(batch.empty()) << "rank " << rank << " has an empty batch";
      for (int64_t i : batch) seen[i] += 1;
    }
  }
  return seen;
}

// A run of one size stops mid-epoch; another size continues from the saved
// position: together they see every sample of the epoch exactly once (the
// sizes divide the dataset, so there is no padding), and the positions
// chain.
TEST(SamplerSteps, AnotherSizeContinuesTheEpochWithEverySampleOnce) {
  const int64_t n = 960;
  SizedOnly data(n);
  struct Change { int world_before; int64_t batch_before; int64_t steps; int world_after; int64_t global_after; };
  for (const Change c : {Change{2, 16, 7, 4, 0}, Change{4, 8, 5, 2, 0}, Change{2, 16, 3, 3, 96}, Change{3, 10, 4, 1, 0},
                         Change{4, 8, 12, 3, 64}}) {
    auto before = make_sampler(spec_of(c.batch_before, true, false), data, c.world_before);
    std::map<int64_t, int> seen;
    for (int rank = 0; rank < c.world_before; ++rank) {
      auto batches = before->batches(1, rank);
      for (int64_t b = 0; b < c.steps; ++b)
        for (int64_t i : batches[b]) seen[i] += 1;
    }
    const int64_t at = *before->position(1, c.steps);
    EXPECT_EQ(at, c.steps * c.batch_before * c.world_before);
    EXPECT_EQ(static_cast<int64_t>(seen.size()), at);
    auto after = make_sampler(spec_of(c.batch_before, true, false), data, c.world_after, c.global_after);
    after->start_epoch_at(1, at);
    for (const auto& [i, count] : seen_from(*after, 1, c.world_after)) seen[i] += count;
    ASSERT_EQ(static_cast<int64_t>(seen.size()), n) << "world " << c.world_before << " -> " << c.world_after;
    for (const auto& [i, count] : seen) ASSERT_EQ(count, 1) << "sample " << i;
    EXPECT_EQ(*after->position(1, 0), at);
    EXPECT_EQ(*after->position(1, after->num_batches(1)), n);
    // Other epochs are whole.
    EXPECT_EQ(seen_from(*after, 2, c.world_after).size(), static_cast<size_t>(n));
  }
}

// A global batch the world does not divide: the first ranks take one more
// sample, and the loss weights make each rank's share of the mean right.
TEST(SamplerSteps, AnUnevenGlobalBatchWeightsTheRanksLosses) {
  SizedOnly data(100);
  auto sampler = make_sampler(spec_of(8, false, false), data, 3, 32);
  EXPECT_EQ(sampler->global_batch(), 32);
  std::vector<std::vector<std::vector<int64_t>>> ranks;
  for (int rank = 0; rank < 3; ++rank) ranks.push_back(sampler->batches(0, rank));
  ASSERT_EQ(sampler->num_batches(0), 4);  // 32, 32, 32 and the 4 left, padded to 6
  EXPECT_EQ(ranks[0][0].size(), 11u);
  EXPECT_EQ(ranks[1][0].size(), 11u);
  EXPECT_EQ(ranks[2][0].size(), 10u);
  EXPECT_EQ(ranks[0][3].size(), 2u);
  EXPECT_EQ(ranks[2][3].size(), 2u);
  for (int64_t b = 0; b < 4; ++b) {
    double sum = 0;
    for (int rank = 0; rank < 3; ++rank) {
      const double w = sampler->loss_weight(0, b, rank);
      // The rank's mean loss x w, averaged over the ranks, weighs each sample 1/len.
      const double len = static_cast<double>(ranks[0][b].size() + ranks[1][b].size() + ranks[2][b].size());
      EXPECT_NEAR(w / 3.0, static_cast<double>(ranks[rank][b].size()) / len, 1e-12);
      sum += w / 3.0;
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }
  // Step 0 holds samples 0..31 in order (no shuffle), shared out.
  std::vector<int64_t> step0;
  for (int rank = 0; rank < 3; ++rank) step0.insert(step0.end(), ranks[rank][0].begin(), ranks[rank][0].end());
  std::sort(step0.begin(), step0.end());
  for (int64_t i = 0; i < 32; ++i) EXPECT_EQ(step0[i], i);
  EXPECT_THROW(make_sampler(spec_of(8, false, false), data, 3, 2), Error);
  // Whatever is left of an epoch, every rank has a sample in every step
  // (the last step is padded, or cut with drop_last, to a multiple of the
  // world size), and the ranks' steps together hold each sample once but
  // for that padding.
  for (int64_t n : {5, 97, 736, 1000})
    for (int world : {2, 3, 5})
      for (int64_t global : {7, 32, 33})
        for (int64_t start : {int64_t{0}, n / 3})
          for (bool drop_last : {false, true}) {
            SizedOnly sized(n);
            auto s = make_sampler(spec_of(4, true, drop_last), sized, world, global);
            s->start_epoch_at(0, start);
            std::map<int64_t, int> seen;
            for (int rank = 0; rank < world; ++rank) {
              auto batches = s->batches(0, rank);
              ASSERT_EQ(static_cast<int64_t>(batches.size()), s->num_batches(0));
              for (const auto& batch : batches) {
                ASSERT_FALSE(batch.empty()) << "n=" << n << " world=" << world << " global=" << global;
                for (int64_t i : batch) seen[i] += 1;
              }
            }
            const int64_t rest = n - start;
            int64_t once = 0;
            for (const auto& [i, times] : seen) once += times == 1;
            EXPECT_GE(once, rest - (drop_last ? world : 0) - (world - 1)) << "n=" << n << " world=" << world;
            if (drop_last) {
              for (const auto& [i, times] : seen) EXPECT_EQ(times, 1);
            }
          }
}

TEST(SamplerSteps, LoadBalancingCannotContinueAnEpochAtAnotherSize) {
  SizedOnly balanced(64);
  balanced.set_complexities(std::vector<double>(64, 1.0));
  DataSpec spec = spec_of(4, true, false);
  spec.sampler.type = SamplerType::kLoadBalancing;
  spec.sampler.complexity_field = "length";
  auto sampler = make_sampler(spec, balanced, 2);
  EXPECT_FALSE(sampler->can_reshard());
  EXPECT_NO_THROW(sampler->start_epoch_at(0, 0));
  try {
    sampler->start_epoch_at(0, 8);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot continue epoch 1 at another world size"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(make_sampler(spec, balanced, 3, 16), Error);  // 16 does not divide among 3
  EXPECT_EQ(make_sampler(spec, balanced, 2, 16)->global_batch(), 16);
}

}  // namespace
}  // namespace bagua
