#include "data/batch_loader.h"

#include <algorithm>
#include <thread>

namespace bagua::data {

BatchLoader::BatchLoader(std::shared_ptr<const Dataset> data, int threads) : data_(std::move(data)) {
  depth_ = 2 * std::max(threads, 0);
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { run(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  for (auto& t : workers_) t.join();
}

void BatchLoader::start(int64_t epoch, std::shared_ptr<const BatchList> batches,
                        int64_t from) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
    epoch_ = epoch;
    batches_ = std::move(batches);
    issued_ = consumed_ = from;
    loaded_.clear();
  }
  work_.notify_all();
}

Batch BatchLoader::next(int64_t b) {
  if (workers_.empty()) return data_->get_training_batch(batches_->at(b), epoch_);
  std::unique_lock<std::mutex> lock(mutex_);
  if (b != consumed_) {
    // Asked out of order (never by the trainer): start over from b.
    ++generation_;
    issued_ = consumed_ = b;
    loaded_.clear();
    work_.notify_all();
  }
  ready_.wait(lock, [&] { return loaded_.count(b) > 0; });
  Loaded got = std::move(loaded_[b]);
  loaded_.erase(b);
  consumed_ = b + 1;
  lock.unlock();
  work_.notify_all();
  if (got.error) std::rethrow_exception(got.error);
  return std::move(got.batch);
}

void BatchLoader::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_.wait(lock, [&] {
      return stopping_ || (batches_ && issued_ < batches_->size() && issued_ < consumed_ + depth_);
    });
    if (stopping_) return;
    const int64_t b = issued_++;
    const uint64_t generation = generation_;
    const int64_t epoch = epoch_;
    const auto batches = batches_;
    lock.unlock();
    Loaded result;
    try {
      result.batch = data_->get_training_batch(batches->at(b), epoch);
    } catch (...) {
      result.error = std::current_exception();
    }
    lock.lock();
    if (generation == generation_) {
      loaded_[b] = std::move(result);
      ready_.notify_all();
    }
  }
}

int loader_threads_for(const DataSpec& spec, const Dataset& train, int local_workers, int compute_threads) {
  if (spec.loader_threads) return static_cast<int>(*spec.loader_threads);
  if (!train.streamed()) return 0;
  if (spec.train.format != DataFormat::kImageFolder) return 1;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int left = cores - std::max(1, local_workers) * std::max(1, compute_threads);
  return std::max(1, left / std::max(1, local_workers));
}

}  // namespace bagua::data
