// The training step's batches, loaded ahead of it: `threads` loader
// threads read, decode and augment an epoch's batches in order
// (Dataset::get_training_batch) into a queue of at most 2 x threads
// batches, so the step finds its batch ready wherever the cores allow.
// With 0 threads next() loads the batch itself, as the step used to.
//
// One epoch at a time: start() names the epoch's batches and where the
// step begins among them, and drops whatever was loaded ahead for another.
// A loader's exception (a DataError on a bad sample) is rethrown by the
// next() that asks for that batch, so bad data stops the run at the step
// that would have used it.
#pragma once

#include <bagua/data.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace bagua::data {

class BatchLoader {
 public:
  BatchLoader(std::shared_ptr<const Dataset> data, int threads);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // From now on next() gives `batches->at(b)` of `epoch`, for b = from, from + 1, ...
  void start(int64_t epoch, std::shared_ptr<const BatchList> batches, int64_t from);
  // Batch `b` of the current epoch (asked for in order, from start()'s
  // `from`); waits while a loader is still at it.
  Batch next(int64_t b);

  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  struct Loaded {
    Batch batch;
    std::exception_ptr error;
  };
  void run();

  std::shared_ptr<const Dataset> data_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_;   // loaders wait for room or an epoch
  std::condition_variable ready_;  // next() waits for its batch
  bool stopping_ = false;
  uint64_t generation_ = 0;  // bumped by start(): loads of an older one are dropped
  int64_t epoch_ = 0;
  std::shared_ptr<const BatchList> batches_;
  int64_t issued_ = 0;    // the next batch a loader takes
  int64_t consumed_ = 0;  // the next batch next() gives
  int64_t depth_ = 0;
  std::map<int64_t, Loaded> loaded_;
};

// The loader threads of a run: data.loader_threads, or for auto: for an
// image folder the cores this node's workers leave over (shared among
// them; at least 1), for token files 1, for data held in memory 0.
int loader_threads_for(const DataSpec& spec, const Dataset& train, int local_workers, int compute_threads);

}  // namespace bagua::data
