// DistributedSampler against Python's torch.utils.data.DistributedSampler
// (Debian's python3-torch, the same LibTorch build), and make_batches.
#include "data/data_test_support.h"

#include <nlohmann/json.hpp>

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

}  // namespace
}  // namespace bagua
