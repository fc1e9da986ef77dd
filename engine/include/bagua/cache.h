// The dataset cache: Bagua's CacheLoader and CachedDataset over Redis.
//
// CacheLoader maps keys to byte strings kept in one or more Redis servers,
// under "{dataset_name}_{key}" (Bagua's key format), sharded across the
// servers by a stable hash of that key (FNV-1a 64, modulo the number of
// servers: every process, every run, sends a key to the same server).
// get(key, load_fn) returns the stored value, or calls load_fn on a miss and
// queues the value for writing; writes go out together, one pipelined MSET
// per server, once writer_buffer_size values are queued (and on flush() and
// destruction). Reads of several keys are one MGET per server, sent to all
// servers before any reply is read.
//
// The cache is never the source of truth. Every value is framed with its
// length and a CRC-32; a frame that does not check out is a miss. When a
// server cannot be reached, refuses AUTH or fails a command, the loader
// prints one warning (stderr, or CacheOptions::warn) and stops using the
// store: every get() calls load_fn, and writes are dropped. It tries to
// reconnect, silently, once retry_after has passed since the failure, so a
// dead server costs at most one timeout per retry_after. Nothing a
// CacheLoader does throws because of the store.
//
// CachedDataset wraps a Dataset: get_batch() reads each sample from the
// cache (key "{dataset_name}_{index}") and decodes only the misses from the
// wrapped dataset, one sample at a time, then stacks the samples exactly as
// the wrapped dataset would (variable-length int64 sequences padded at the
// end with pad_value), so a batch is bitwise the same with or without the
// cache. Each sample is stored as a small header (a tag of the wrapped
// dataset's describe(), so entries of another data set under the same
// dataset_name are misses, not wrong samples) and the raw bytes of its
// input and target tensors.
//
// Both are safe to call from several threads (one lock per loader).
#pragma once

#include <bagua/data.h>
#include <bagua/recipe_spec.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace bagua {

namespace store {
class RedisStore;
}

struct CacheOptions {
  // Keys are "{dataset_name}_{key}"; loaders with the same name share (and
  // overwrite) entries.
  std::string dataset_name;
  // Values queued before one write to the store (>= 1).
  int64_t writer_buffer_size = 20;
  // The Redis servers (at least one); keys are sharded across all of them.
  std::vector<CacheHost> hosts;
  // Sent with AUTH when not empty.
  std::string password;
  // Connect timeout, and timeout of each command.
  std::chrono::milliseconds timeout{2000};
  // After a store failure, the loader stays away from the store this long,
  // then tries to reconnect once.
  std::chrono::milliseconds retry_after{30000};
  // Where the (at most one per kind of fault) warnings go; default: stderr,
  // "bagua: warning: ...".
  std::function<void(const std::string&)> warn;
};

class CacheLoader {
 public:
  using LoadFn = std::function<std::string(const std::string& key)>;

  // Connects to every host. Throws InvalidArgument for no hosts or a
  // writer_buffer_size below 1; a host that cannot be used is a warning
  // (the loader then works without the store), not an exception.
  explicit CacheLoader(CacheOptions options);
  // Writes the queued values (best effort).
  ~CacheLoader();
  CacheLoader(const CacheLoader&) = delete;
  CacheLoader& operator=(const CacheLoader&) = delete;

  // The value of `key`: from the store, else load_fn(key) (then queued for
  // writing). Exceptions of load_fn propagate.
  std::string get(const std::string& key, const LoadFn& load_fn);
  // get() for several keys, with one round trip to the store.
  std::vector<std::string> get_many(const std::vector<std::string>& keys, const LoadFn& load_fn);

  // The lower layer get() is made of. lookup(): the stored (or queued)
  // value of each key, nullopt for a miss, a corrupt frame or a store that
  // is down. put(): queues `value` for writing under `key`.
  std::vector<std::optional<std::string>> lookup(const std::vector<std::string>& keys);
  void put(const std::string& key, std::string value);
  // Writes the queued values now.
  void flush();

  // Keys in the store, every server summed (Redis DBSIZE: other data in the
  // same databases counts too, as in Bagua); -1 when the store is down.
  int64_t num_keys();
  // Drops the queued values and deletes every "{dataset_name}_*" key from
  // every server (SCAN + UNLINK). A spawned server itself is stopped by its
  // owner (bagua run's launcher), not here.
  void cleanup();

  // False while the store is considered down.
  bool available();
  // "redis 127.0.0.1:6379 (+1 more) as 'fmnist'".
  std::string describe() const;
  const CacheOptions& options() const { return options_; }

  // Warns (through options().warn) once per `kind` for this loader.
  void warn_once(const std::string& kind, const std::string& message);

 private:
  std::string full_key(const std::string& key) const { return options_.dataset_name + "_" + key; }
  // The store when it is usable now (reconnecting when retry_after has
  // passed), else null. Callers hold mutex_.
  store::RedisStore* usable_store();
  void store_failed(const std::string& what);
  void flush_locked();

  CacheOptions options_;
  std::mutex mutex_;
  std::unique_ptr<store::RedisStore> store_;
  std::chrono::steady_clock::time_point failed_at_{};
  bool failed_ = false;
  std::vector<std::pair<std::string, std::string>> queued_;
  std::unordered_map<std::string, size_t> queued_index_;  // full key -> position in queued_
  std::mutex warn_mutex_;
  std::vector<std::string> warned_;
};

struct CachedDatasetOptions {
  // The value the wrapped dataset pads variable-length sequences with (a
  // jsonl source's pad_value); used when a batch stacks cached sequences of
  // different lengths.
  int64_t pad_value = 0;
  // Extra text identifying the source (e.g. its file paths), hashed into
  // each entry's tag with the wrapped dataset's describe().
  std::string source_identity;
};

class CachedDataset : public Dataset {
 public:
  // Caches `dataset`'s samples through `loader`. The dataset's
  // complexities are carried over.
  CachedDataset(std::shared_ptr<Dataset> dataset, std::shared_ptr<CacheLoader> loader,
                CachedDatasetOptions options = {});
  // Same, over a loader of its own.
  CachedDataset(std::shared_ptr<Dataset> dataset, CacheOptions cache, CachedDatasetOptions options = {});

  int64_t size() const override { return dataset_->size(); }
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  Batch load_samples(const std::vector<int64_t>& indices) const override;
  void finish_samples(Batch& batch, const std::vector<int64_t>& indices, int64_t epoch) const override {
    dataset_->finish_samples(batch, indices, epoch);
  }
  std::string describe() const override;
  int64_t num_classes() const override { return dataset_->num_classes(); }
  std::vector<std::string> class_names() const override { return dataset_->class_names(); }
  int64_t memory_bytes() const override { return dataset_->memory_bytes(); }
  double read_bytes_per_sample() const override { return dataset_->read_bytes_per_sample(); }
  int64_t skipped_samples() const override { return dataset_->skipped_samples(); }

  CacheLoader& cache_loader() const { return *loader_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  std::shared_ptr<Dataset> dataset_;
  std::shared_ptr<CacheLoader> loader_;
  CachedDatasetOptions options_;
  uint64_t tag_;
  // The source's sample 0 (when there is one): a cached entry must have its
  // dtypes and shapes (a token sequence may differ only in length), else
  // it is malformed and decoded from the source again.
  Batch reference_;
  bool fits_source(const Batch& sample) const;
};

}  // namespace bagua
