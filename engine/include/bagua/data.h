// Datasets and the distributed sampler.
//
// load_dataset() reads a whole data source (recipe `data.train` /
// `data.eval`) into memory and checks every record before returning, so bad
// data is reported before any worker trains. Four formats (docs/data.md):
//   idx      MNIST-style IDX image and label files, gzipped or not
//   csv      numeric columns; one is the target, the others (or a chosen
//            list) the input
//   jsonl    one JSON object per line: an input list (integer token
//            sequence, padded per batch, or fixed-length numbers) and a target
//   tensors  a file written by Python's torch.save({'input': X, 'target': Y})
// Any problem with the data (missing file, wrong magic, truncated file,
// ragged row, non-numeric field, malformed JSON, missing key, ...) throws
// DataError, a user error whose message names the file and the line (csv,
// jsonl: "FILE:LINE: ...", 1-based) or the record / byte offset (idx,
// tensors).
//
// DistributedSampler reproduces torch.utils.data.DistributedSampler exactly
// (same indices for the same size, replicas, rank, seed, epoch, shuffle and
// drop_last, given the same LibTorch build).
//
// Datasets are immutable after loading; get_batch() may be called from
// several threads at once.
#pragma once

#include <bagua/errors.h>
#include <bagua/recipe.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bagua {

// A bad data file: a user error (the CLI exits 2). The message names the
// file and where in it the problem is.
class DataError : public Error {
 public:
  explicit DataError(const std::string& message) : Error(message, /*user_error=*/true) {}
};

// What the loss expects as target.
enum class TargetKind {
  kClassIndex,  // int64 class ids, >= 0 (cross_entropy, nll)
  kFloat,       // float32 values (mse, l1, bce_with_logits)
};

// The target kind a loss needs; kModel (the model computes its own loss)
// gets kFloat.
TargetKind target_kind_for(Loss loss);

// One batch: samples stacked along dimension 0.
struct Batch {
  at::Tensor input;
  at::Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  // Number of samples.
  virtual int64_t size() const = 0;

  // Stacks the samples at `indices` (in that order) into one batch.
  // input: float32 [n, ...input_shape] for idx, csv, tensors and jsonl number
  //   lists; int64 [n, L] for jsonl integer sequences, padded with pad_value
  //   to the longest sequence in the batch, or truncated/padded to exactly
  //   max_length when that is set.
  // target: int64 [n] for kClassIndex; float32 [n] or [n, k...] for kFloat.
  // Throws InvalidArgument for an index outside [0, size()).
  virtual Batch get_batch(const std::vector<int64_t>& indices) const = 0;

  // One line, e.g. "idx train-images-idx3-ubyte.gz: 60000 samples,
  // input [784] float32, target int64 (10 classes)".
  virtual std::string describe() const = 0;

  // For kClassIndex targets: the number of classes (largest label + 1);
  // 0 for kFloat targets.
  virtual int64_t num_classes() const = 0;

  // Bytes the loaded samples occupy in memory (what each worker holds; the
  // data is not sharded). The formats report their own storage (IDX keeps
  // pixels as bytes, JSONL sequences unpadded); the default, for other
  // datasets, is size() times one sample as get_batch() returns it.
  virtual int64_t memory_bytes() const;
};

// Loads the whole source into memory, fully checking it. Throws DataError
// on any bad data (and on a file that cannot be read).
std::shared_ptr<Dataset> load_dataset(const DataSource& source, TargetKind target_kind);

// torch.utils.data.DistributedSampler, exactly. For epoch e:
//   - shuffle: the order is randperm(n) from a CPU generator seeded with
//     seed + e (Python: g.manual_seed(seed + e); torch.randperm(n, generator=g));
//     otherwise 0, 1, ..., n-1;
//   - without drop_last the list is padded by repeating it from its start up
//     to a multiple of num_replicas; with drop_last it is truncated to one;
//   - rank r takes indices[r], indices[r + num_replicas], ...
// Throws InvalidArgument for num_replicas < 1, a rank outside
// [0, num_replicas) or a negative dataset size.
class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle,
                     uint64_t seed, bool drop_last);

  // Selects the epoch whose order indices() returns (default 0).
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  // Samples per rank and per epoch (the same on every rank).
  int64_t num_samples() const { return num_samples_; }
  // num_samples() * num_replicas.
  int64_t total_size() const { return num_samples_ * num_replicas_; }

  // This rank's indices for the current epoch, in order.
  std::vector<int64_t> indices() const;

 private:
  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
};

// Splits `indices` into consecutive batches of `batch_size`; the last batch
// is smaller when the size does not divide, or dropped with drop_last.
// Throws InvalidArgument for batch_size < 1.
std::vector<std::vector<int64_t>> make_batches(const std::vector<int64_t>& indices,
                                               int64_t batch_size, bool drop_last = false);

}  // namespace bagua
