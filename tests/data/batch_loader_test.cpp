// BatchLoader (engine/src/data/batch_loader.h): the training batches of an
// epoch, loaded ahead of the step on loader threads, in order, each
// exactly as the step would load it, a bad sample's error at the batch
// that holds it, and a new epoch dropping what was loaded for the old one.
// (Here, in test_data, so the ThreadSanitizer build runs it.)
#include "data/batch_loader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

namespace bagua::testing {
namespace {

// Sample i is the value i (input) and the epoch it was finished in
// (target); sample `bad` throws; every load is counted.
class Numbers : public Dataset {
 public:
  explicit Numbers(int64_t n, int64_t bad = -1) : n_(n), bad_(bad) {}
  int64_t size() const override { return n_; }
  int64_t num_classes() const override { return 0; }
  std::string describe() const override { return "numbers"; }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    Batch b = load_samples(indices);
    finish_samples(b, indices, -1);
    return b;
  }
  Batch load_samples(const std::vector<int64_t>& indices) const override {
    loads_.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (int64_t i : indices)
      if (i == bad_) throw DataError("sample " + std::to_string(i) + " is bad");
    return {at::tensor(at::ArrayRef<int64_t>(indices), at::kLong), at::Tensor()};
  }
  void finish_samples(Batch& b, const std::vector<int64_t>& indices, int64_t epoch) const override {
    b.target = at::full({static_cast<int64_t>(indices.size())}, epoch, at::kLong);
  }
  mutable std::atomic<int> loads_{0};

 private:
  int64_t n_, bad_;
};

std::vector<std::vector<int64_t>> batches_of(int64_t n, int64_t size, int64_t offset = 0) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t i = 0; i < n; i += size) {
    std::vector<int64_t> b;
    for (int64_t j = i; j < std::min(n, i + size); ++j) b.push_back(j + offset);
    out.push_back(b);
  }
  return out;
}

std::shared_ptr<const BatchList> shared(std::vector<std::vector<int64_t>> batches) {
  return batch_list_of(std::move(batches));
}

void expect_batch(const Batch& b, const std::vector<int64_t>& samples, int64_t epoch) {
  ASSERT_EQ(b.input.numel(), static_cast<int64_t>(samples.size()));
  for (size_t k = 0; k < samples.size(); ++k) {
    EXPECT_EQ(b.input[static_cast<int64_t>(k)].item<int64_t>(), samples[k]);
    EXPECT_EQ(b.target[static_cast<int64_t>(k)].item<int64_t>(), epoch);
  }
}

TEST(BatchLoader, GivesEachBatchInOrderAsTheStepWouldLoadIt) {
  for (int threads : {0, 1, 3}) {
    SCOPED_TRACE(threads);
    auto data = std::make_shared<Numbers>(100);
    data::BatchLoader loader(data, threads);
    EXPECT_EQ(loader.threads(), threads);
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      const auto batches = batches_of(100, 7, 0);
      loader.start(epoch, shared(batches), epoch == 0 ? 0 : 4);  // epoch 1 resumes at batch 4
      for (int64_t b = epoch == 0 ? 0 : 4; b < static_cast<int64_t>(batches.size()); ++b)
        expect_batch(loader.next(b), batches[static_cast<size_t>(b)], epoch);
    }
  }
}

TEST(BatchLoader, LoadsAheadAtMostTwoBatchesPerThread) {
  auto data = std::make_shared<Numbers>(1000);
  data::BatchLoader loader(data, 2);
  loader.start(0, shared(batches_of(1000, 10)), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(data->loads_.load(), 4) << "2 threads x 2 batches, none asked for yet";
  (void)loader.next(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(data->loads_.load(), 5);
}

TEST(BatchLoader, ABadSampleFailsTheStepOfItsBatchNotAnEarlierOne) {
  auto data = std::make_shared<Numbers>(50, /*bad=*/23);
  data::BatchLoader loader(data, 2);
  const auto batches = batches_of(50, 5);
  loader.start(0, shared(batches), 0);
  for (int64_t b = 0; b < 4; ++b) EXPECT_NO_THROW(loader.next(b)) << b;  // batch 4 holds 20..24
  EXPECT_THROW(loader.next(4), DataError);
}

TEST(BatchLoader, ANewEpochDropsWhatWasLoadedForTheOld) {
  auto data = std::make_shared<Numbers>(60);
  data::BatchLoader loader(data, 3);
  loader.start(0, shared(batches_of(60, 6)), 0);
  (void)loader.next(0);
  // Stopped after one batch (max_steps, a signal): the next epoch, other samples.
  const auto other = batches_of(60, 6, 1000);
  loader.start(1, shared(other), 0);
  for (int64_t b = 0; b < 10; ++b) expect_batch(loader.next(b), other[static_cast<size_t>(b)], 1);
}

TEST(BatchLoader, StopsCleanlyWithBatchesInFlight) {
  auto data = std::make_shared<Numbers>(10000);
  {
    data::BatchLoader loader(data, 4);
    loader.start(0, shared(batches_of(10000, 50)), 0);
    (void)loader.next(0);
  }  // destroyed while its threads load
  SUCCEED();
}

TEST(BatchLoader, AutoUsesNoneForDataInMemoryOneForTokensAndTheSpareCoresForImages) {
  Numbers in_memory(10);
  DataSpec spec;
  EXPECT_EQ(data::loader_threads_for(spec, in_memory, 2, 1), 0);
  spec.loader_threads = 3;
  EXPECT_EQ(data::loader_threads_for(spec, in_memory, 2, 1), 3);
}

}  // namespace
}  // namespace bagua::testing
