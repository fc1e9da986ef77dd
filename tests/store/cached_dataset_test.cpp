// CachedDataset over a real redis-server: batches bitwise equal to the
// wrapped dataset's, cold and warm, for fixed-shape samples and for token
// sequences padded per batch; evicted, corrupt or foreign entries fall back
// to the source.
#include <bagua/cache.h>
#include <bagua/data.h>

#include "data/dataset_impl.h"
#include "store/key_sharding.h"
#include "store/redis_test_support.h"
#include "store/sample_codec.h"
#include "store/value_frame.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

namespace {

using namespace bagua;
using namespace bagua::testing;

// A dataset that counts the samples it decodes.
class CountingDataset : public Dataset {
 public:
  explicit CountingDataset(std::shared_ptr<Dataset> inner) : inner_(std::move(inner)) {}
  int64_t size() const override { return inner_->size(); }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    decoded += static_cast<int64_t>(indices.size());
    return inner_->get_batch(indices);
  }
  std::string describe() const override { return inner_->describe(); }
  int64_t num_classes() const override { return inner_->num_classes(); }
  mutable int64_t decoded = 0;

 private:
  std::shared_ptr<Dataset> inner_;
};

std::shared_ptr<CountingDataset> float_dataset(int64_t n) {
  at::Tensor input = at::rand({n, 3, 4});
  at::Tensor target = at::randint(0, 5, {n}, at::kLong);
  return std::make_shared<CountingDataset>(
      std::make_shared<data::TensorDataset>("tensors test", input, target, TargetKind::kClassIndex));
}

// Token sequences of lengths 1..7 in a jsonl file.
std::shared_ptr<CountingDataset> sequence_dataset(const std::string& dir, int64_t pad_value) {
  const std::string path = dir + "/bagua-cache-tokens-" + std::to_string(::getpid()) + ".jsonl";
  std::ofstream out(path);
  for (int i = 0; i < 30; ++i) {
    out << "{\"input\": [";
    for (int t = 0; t <= i % 7; ++t) out << (t ? ", " : "") << (i * 10 + t + 1);
    out << "], \"target\": " << i % 3 << "}\n";
  }
  out.close();
  DataSource source;
  source.format = DataFormat::kJsonl;
  source.path = path;
  source.pad_value = pad_value;
  return std::make_shared<CountingDataset>(load_dataset(source, TargetKind::kClassIndex));
}

void expect_same_batch(const Batch& a, const Batch& b) {
  ASSERT_EQ(a.input.sizes(), b.input.sizes());
  ASSERT_EQ(a.input.scalar_type(), b.input.scalar_type());
  EXPECT_TRUE(a.input.equal(b.input));
  EXPECT_TRUE(a.target.equal(b.target));
  EXPECT_EQ(a.target.scalar_type(), b.target.scalar_type());
  EXPECT_EQ(a.padding, b.padding);
}

const std::vector<std::vector<int64_t>> kBatches = {{0, 5, 3, 11}, {7, 1, 6}, {2, 9, 5, 13, 20}};

TEST(CachedDataset, BatchesEqualTheSourceColdAndWarmAndWarmSkipsDecoding) {
  auto server = start_test_server();
  std::vector<std::string> warnings;
  auto source = float_dataset(24);
  CachedDataset cold(source, loader_options({server.get()}, "f", &warnings));
  for (const auto& b : kBatches) expect_same_batch(cold.get_batch(b), source->get_batch(b));
  cold.cache_loader().flush();
  EXPECT_EQ(cold.cache_loader().num_keys(), 11);

  source->decoded = 0;
  CachedDataset warm(source, loader_options({server.get()}, "f", &warnings));
  for (const auto& b : kBatches) {
    Batch cached = warm.get_batch(b);
    source->decoded = 0;  // the reference batch below decodes, the cached one must not have
    expect_same_batch(cached, source->get_batch(b));
  }
  CachedDataset warm_again(source, loader_options({server.get()}, "f", &warnings));
  source->decoded = 0;
  for (const auto& b : kBatches) warm_again.get_batch(b);
  EXPECT_EQ(source->decoded, 0) << "a warm cache decodes nothing";
  EXPECT_TRUE(warnings.empty());
  EXPECT_THROW(warm.get_batch({24}), InvalidArgument);
}

TEST(CachedDataset, SequencesArePaddedPerBatchExactlyAsTheSourcePadsThem) {
  auto server = start_test_server();
  std::vector<std::string> warnings;
  const std::string dir = ::testing::TempDir();
  auto source = sequence_dataset(dir, -3);
  CachedDatasetOptions options;
  options.pad_value = -3;
  CachedDataset cold(source, loader_options({server.get()}, "s", &warnings), options);
  CachedDataset warm(source, loader_options({server.get()}, "s", &warnings), options);
  for (const auto& b : kBatches) expect_same_batch(cold.get_batch(b), source->get_batch(b));
  cold.cache_loader().flush();
  source->decoded = 0;
  for (const auto& b : kBatches) {
    Batch cached = warm.get_batch(b);
    EXPECT_EQ(source->decoded, 0);
    Batch direct = source->get_batch(b);
    EXPECT_GT(direct.padding, 0);
    expect_same_batch(cached, direct);
    source->decoded = 0;
  }
  EXPECT_TRUE(warnings.empty());
}

TEST(CachedDataset, EvictedCorruptAndForeignEntriesFallBackToTheSource) {
  auto server = start_test_server();
  std::vector<std::string> warnings;
  auto source = float_dataset(24);
  CachedDataset cold(source, loader_options({server.get()}, "e", &warnings));
  for (const auto& b : kBatches) cold.get_batch(b);
  cold.cache_loader().flush();
  auto raw = connect_to(*server);
  raw->command({"DEL", "e_0", "e_5"});                // evicted
  raw->command({"SET", "e_3", "garbage"});             // corrupt
  CachedDataset warm(source, loader_options({server.get()}, "e", &warnings));
  for (const auto& b : kBatches) expect_same_batch(warm.get_batch(b), source->get_batch(b));
  ASSERT_EQ(warnings.size(), 1u) << "one warning, for the corrupt entry; an eviction is an ordinary miss";

  // Another data set under the same dataset_name: misses, not its samples.
  auto other = float_dataset(24);
  CachedDatasetOptions identity;
  identity.source_identity = "another file";
  CachedDataset foreign(other, loader_options({server.get()}, "e", &warnings), identity);
  for (const auto& b : kBatches) expect_same_batch(foreign.get_batch(b), other->get_batch(b));
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[1].find("another data set"), std::string::npos) << warnings[1];
}

// Entries of this data set's tag whose sample is shaped or typed unlike the
// source's (a shorter or longer feature row, another dtype) are malformed:
// decoded from the source, never padded as if they were token sequences.
TEST(CachedDataset, EntriesShapedUnlikeTheSourceAreMalformedNotPadded) {
  auto server = start_test_server();
  std::vector<std::string> warnings;
  auto source = float_dataset(24);
  const uint64_t tag = bagua::store::fnv1a_64(source->describe() + "\n");
  auto raw = connect_to(*server);
  Batch longer{at::rand({1, 3, 5}), at::zeros({1}, at::kLong)};
  Batch as_tokens{at::ones({1, 7}, at::kLong), at::zeros({1}, at::kLong)};
  Batch other_dtype{at::rand({1, 3, 4}).to(at::kDouble), at::zeros({1}, at::kLong)};
  raw->command({"SET", "s_3", bagua::store::frame_value(bagua::data::encode_sample(longer, tag))});
  raw->command({"SET", "s_5", bagua::store::frame_value(bagua::data::encode_sample(as_tokens, tag))});
  raw->command({"SET", "s_7", bagua::store::frame_value(bagua::data::encode_sample(other_dtype, tag))});
  raw->command({"SET", "s_9", bagua::store::frame_value(bagua::data::encode_sample(source->get_batch({9}), tag))});  // a good one
  CachedDataset cached(source, loader_options({server.get()}, "s", &warnings));
  const int64_t decoded_before = source->decoded;
  expect_same_batch(cached.get_batch({3, 5, 7, 9}), source->get_batch({3, 5, 7, 9}));
  EXPECT_EQ(source->decoded - decoded_before, 3 + 4) << "3 malformed entries from the source, then the reference batch";
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("is not a sample"), std::string::npos) << warnings[0];
}

TEST(CachedDataset, AKilledServerGivesTheSourceBatches) {
  auto server = start_test_server();
  std::vector<std::string> warnings;
  auto source = float_dataset(24);
  CachedDataset cached(source, loader_options({server.get()}, "k", &warnings));
  cached.get_batch(kBatches[0]);
  server->stop();
  for (const auto& b : kBatches) expect_same_batch(cached.get_batch(b), source->get_batch(b));
  EXPECT_EQ(warnings.size(), 1u);
}

}  // namespace
