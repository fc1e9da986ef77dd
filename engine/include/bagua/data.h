// Datasets and samplers.
//
// load_dataset() opens a data source (recipe `data.train` / `data.eval`).
// Four formats are read whole into memory, every record checked before it
// returns, so bad data is reported before any worker trains:
//   idx      MNIST-style IDX image and label files, gzipped or not
//   csv      numeric columns; one is the target, the others (or a chosen
//            list) the input
//   jsonl    one JSON object per line: an input list (integer token
//            sequence, padded per batch, or fixed-length numbers) and a target
//   tensors  a file written by Python's torch.save({'input': X, 'target': Y})
// Two are streamed: opened (mapped, listed) at load, read sample by sample
// in get_batch(), so a worker's memory does not grow with them; a bad
// sample found there is a DataError too (exit 2):
//   tokens        flat binary files of token ids (uint16 or uint32), windows
//                 of context + 1 tokens: input int64 [context], target the
//                 next-token shift
//   image_folder  ROOT/CLASS/*.{jpg,jpeg,png}, decoded (libjpeg-turbo,
//                 libpng), resized, centre-cropped to [C, H, W], in 0..1
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
#include <bagua/recipe_spec.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
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
  // Elements of `input` that are padding (jsonl token sequences padded to
  // the longest in the batch); 0 for data that is never padded.
  int64_t padding = 0;
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

  // Formats whose classes have names (image_folder: the class directories,
  // sorted; label i is the i-th): the names. Empty for numeric labels.
  virtual std::vector<std::string> class_names() const { return {}; }

  // Samples the first batch may not stand for, which the preflight feeds
  // the model before any worker starts: for token sequences, the one
  // holding the largest id, the smallest and the longest sequence (an id
  // beyond a model's embedding otherwise fails mid-run, when a batch draws
  // it). `line` is the sample's line in its file (0 where the format has
  // none); `holds` says what it holds ("token id 300").
  struct EdgeSample {
    int64_t index = 0;
    int64_t line = 0;
    std::string holds;
  };
  virtual std::vector<EdgeSample> edge_samples() const { return {}; }

  // Each sample's complexity, read from LoadOptions::complexity_field (a
  // number, or a list's length); empty when no field was asked for.
  const std::vector<double>& complexities() const { return complexities_; }
  // Loaders set them (as may a C++ dataset of one's own, for the
  // load_balancing sampler); one per sample.
  void set_complexities(std::vector<double> complexities) { complexities_ = std::move(complexities); }

  // Bytes the loaded samples occupy in memory (what each worker holds; the
  // data is not sharded). The formats report their own storage (IDX keeps
  // pixels as bytes, JSONL sequences unpadded; the streamed formats hold
  // only their file lists); the default, for other datasets, is size()
  // times one sample as get_batch() returns it.
  virtual int64_t memory_bytes() const;

  // Streamed datasets read their files in get_batch(): bytes read from
  // storage per sample (on average), for `bagua plan`; 0 for data held in
  // memory.
  virtual double read_bytes_per_sample() const { return 0; }
  bool streamed() const { return read_bytes_per_sample() > 0; }

  // Training batches come in two stages, so that a cache can hold what the
  // first gives and each epoch still draws fresh augmentations:
  // load_samples() reads and decodes (the image folder: uint8 pixels as
  // decoded, before augmentation), finish_samples() makes the batch the
  // model takes (augmentation drawn per sample and epoch, scaling,
  // normalization). get_batch() is load_samples() then finish_samples() at
  // epoch -1: no augmentation. For the other formats load_samples() is
  // get_batch() and finish_samples() does nothing.
  virtual Batch load_samples(const std::vector<int64_t>& indices) const { return get_batch(indices); }
  virtual void finish_samples(Batch& /*batch*/, const std::vector<int64_t>& /*indices*/, int64_t /*epoch*/) const {}
  // load_samples() then finish_samples() at `epoch`: what training uses.
  Batch get_training_batch(const std::vector<int64_t>& indices, int64_t epoch) const {
    Batch b = load_samples(indices);
    finish_samples(b, indices, epoch);
    return b;
  }

  // Samples replaced because their file could not be read
  // (image_folder's skip_unreadable), so far, in this process.
  virtual int64_t skipped_samples() const { return 0; }

 private:
  std::vector<double> complexities_;
};

class SharedData;  // below

// What a loader reads besides inputs and targets.
struct LoadOptions {
  // csv column or jsonl field holding each sample's complexity (for the
  // load_balancing sampler): a non-negative number, or a list, whose
  // complexity is its length. Empty: none. A missing field, or a value of
  // another kind, is a DataError naming the line. Other formats have no
  // fields: asking for one there is a DataError.
  std::string complexity_field;
  // csv: a column left out of the default input columns although its
  // values are not read (the complexity column of data.sampler, in the
  // eval set); nothing is left out when the file has no such column. The
  // column of complexity_field is always left out of the defaults.
  std::string sampler_column = {};
  // image_folder: draw the training augmentations of data.train (random_flip,
  // random_crop) from this seed, the sample and the epoch; false for an
  // eval set, which is never augmented.
  bool augment = false;
  uint64_t augment_seed = 0;
  // image_folder: label each class directory by its place in these names
  // (data.train's classes, for the eval set), not by its place among its
  // own: an eval folder holding some of the classes is scored as the model
  // was trained. A class not among them is a DataError. Empty: its own.
  std::vector<std::string> class_names = {};
  // idx: the images check_dataset() already inflated into `shared` (the
  // launcher's SharedData) are mapped from there instead of inflated again.
  // Null: those BAGUA_SHARED_DATA names (a worker's), else the file.
  const SharedData* shared = nullptr;
};

// The options a recipe's data section asks of its training set, and of its
// eval set (no complexities, the same default input columns).
LoadOptions load_options_for(const DataSpec& spec);
LoadOptions eval_load_options_for(const DataSpec& spec);

// Loads the whole source into memory, fully checking it. Throws DataError
// on any bad data (and on a file that cannot be read).
std::shared_ptr<Dataset> load_dataset(const DataSource& source, TargetKind target_kind,
                                      const LoadOptions& options = {});

// IDX images that `bagua run`'s launcher inflated once into memory it
// shares with the workers it starts (memfd_create, inherited across exec;
// the workers find them through the BAGUA_SHARED_DATA variable, "FD PATH"
// per line), so a node holds one copy of the pixels whatever its number of
// workers. load_dataset() maps a shared file read-only instead of reading
// its path. The descriptors close at destruction; the memory is freed when
// the last process that maps it exits.
class SharedData {
 public:
  SharedData() = default;
  ~SharedData();
  SharedData(const SharedData&) = delete;
  SharedData& operator=(const SharedData&) = delete;
  // Takes ownership of `fd`, which holds `path`'s inflated contents.
  void add(const std::string& path, int fd);
  // BAGUA_SHARED_DATA's value for the workers (empty when nothing is shared).
  std::string env_value() const;
  // The fd holding `path`'s inflated contents, or -1.
  int fd_for(const std::string& path) const;

 private:
  std::vector<std::pair<std::string, int>> files_;
};

inline constexpr const char* kSharedDataEnv = "BAGUA_SHARED_DATA";

// What `bagua run` checks before it starts any worker, without loading the
// data set: files that open; IDX headers, sizes and gzip streams (the
// images streamed through, not kept); the first MiB of csv and jsonl files
// parsed as load_dataset() would, with the complexity field; tensors files
// are loaded (a pickle is only checked by reading it). Returns a one-line description. Errors deeper in a file are
// found by each worker's load_dataset() (a DataError, exit 2, not retried).
// With `share`, the IDX images streamed through are kept in a SharedData
// file rather than dropped.
std::string check_dataset(const DataSource& source, TargetKind target_kind, const LoadOptions& options = {},
                          SharedData* share = nullptr);

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
  // Rank `rank`'s indices for the current epoch.
  std::vector<int64_t> indices_for(int rank) const;

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

// Bagua's LoadBalancingDistributedSampler: in each step every rank gets
// samples of similar complexity. For epoch e:
//   - samples are sorted by complexity (stable: ties keep index order);
//     with shuffle, a CPU generator seeded with seed + e first adds
//     randint(int((max - min) * random_level + 1)) to each complexity
//     (torch.randint, one draw per sample, in index order);
//   - the sorted list is cut into chunks of num_replicas consecutive
//     samples, num_samples chunks (wrapping around to the list's start to
//     fill the last ones);
//   - with shuffle the chunks are visited in randperm(num_samples) order
//     (same generator), otherwise in order; rank r takes element r of each.
// num_samples is DistributedSampler's. With drop_last, the chunks cover
// the num_samples * num_replicas least complex samples (after the noise).
// Throws InvalidArgument for an empty complexity list, a negative or
// non-finite complexity, random_level outside [0, 1], num_replicas < 1 or
// a rank outside [0, num_replicas).
class LoadBalancingDistributedSampler {
 public:
  LoadBalancingDistributedSampler(std::vector<double> complexity, int num_replicas, int rank, bool shuffle,
                                  uint64_t seed, bool drop_last, double random_level);

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }
  int num_replicas() const { return num_replicas_; }
  bool drop_last() const { return drop_last_; }

  // This rank's indices for the current epoch.
  std::vector<int64_t> indices() const { return indices_for(rank_); }
  std::vector<int64_t> indices_for(int rank) const;
  // Every rank's indices for the current epoch (one shuffle): [rank][i].
  std::vector<std::vector<int64_t>> all_indices() const;

 private:
  std::vector<double> complexity_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
  int64_t random_number_;
};

// Bagua's LoadBalancingDistributedBatchSampler: each rank's indices from
// `sampler` cut by `batch_fn` into batches; with drop_last every rank keeps
// as many batches as the rank with the fewest, otherwise every rank repeats
// its own batches from the first until it has as many as the rank with the
// most. `sampler` must not drop_last (as in Bagua).
class LoadBalancingDistributedBatchSampler {
 public:
  using BatchFn = std::function<std::vector<std::vector<int64_t>>(const std::vector<int64_t>&)>;
  LoadBalancingDistributedBatchSampler(LoadBalancingDistributedSampler sampler, BatchFn batch_fn, int rank,
                                       bool drop_last = false);

  void set_epoch(int64_t epoch) { sampler_.set_epoch(epoch); }
  // Every rank's batches for the current epoch: [rank][batch].
  std::vector<std::vector<std::vector<int64_t>>> all_batches() const;
  // This rank's.
  std::vector<std::vector<int64_t>> batches() const { return all_batches().at(rank_); }

 private:
  LoadBalancingDistributedSampler sampler_;
  BatchFn batch_fn_;
  int rank_;
  bool drop_last_;
};

// A batch_fn for the batch sampler: consecutive batches of `indices`, each
// as long as (samples in it) x (largest complexity in it) <= budget and it
// holds at most max_samples; a sample over the budget on its own is a
// batch of one. Throws InvalidArgument for budget < 1 or max_samples < 1.
std::vector<std::vector<int64_t>> batches_within_budget(const std::vector<int64_t>& indices,
                                                        const std::vector<double>& complexity, double budget,
                                                        int64_t max_samples);

// What the trainer asks of a sampler: each rank's batches, epoch by epoch.
// Every rank gets the same number of batches in an epoch. Implementations
// are stateless (the epoch is an argument), so any rank's batches can be
// asked for: a report naming another rank's samples does so.
// One rank's batches of one epoch, each made when it is asked for, so an
// epoch of millions of samples is not held as lists of indices.
class BatchList {
 public:
  virtual ~BatchList() = default;
  virtual int64_t size() const = 0;
  // Batch `b`'s sample indices; std::out_of_range outside [0, size()).
  virtual std::vector<int64_t> at(int64_t b) const = 0;
};

// Batches already made, as a BatchList.
std::shared_ptr<const BatchList> batch_list_of(std::vector<std::vector<int64_t>> batches);

// Position p of a keyed permutation of [0, n): a 4-round Feistel network
// over the smallest power of 4 at least n, keyed by `key`, walked until it
// lands inside [0, n). A bijection for every key; needs no memory. The
// distributed sampler's shuffle for epochs of more than
// kMaterializedOrderLimit samples (the ones below take torch.randperm's
// order, as PyTorch's DistributedSampler does).
int64_t keyed_permutation(int64_t n, uint64_t key, int64_t p);
inline constexpr int64_t kMaterializedOrderLimit = int64_t{1} << 22;

class Sampler {
 public:
  virtual ~Sampler() = default;
  // Rank `rank`'s batches in epoch `epoch`, in order.
  virtual std::vector<std::vector<int64_t>> batches(int64_t epoch, int rank) const = 0;
  // The same batches, made as they are asked for where the sampler can
  // (the distributed sampler), else batches() held in memory.
  virtual std::shared_ptr<const BatchList> batch_list(int64_t epoch, int rank) const {
    return batch_list_of(batches(epoch, rank));
  }
  // Batches per rank in epoch `epoch`.
  virtual int64_t num_batches(int64_t epoch) const = 0;
  // Samples per rank and epoch (the sum of the batch sizes; for variable
  // batches, of epoch `epoch`).
  virtual int64_t samples_per_rank(int64_t epoch) const = 0;
  // "distributed (shuffle, seed 0)", "load_balancing on 'length' ...".
  virtual std::string describe() const = 0;

  // Re-sharding, for a resume at another world size or batch size.
  //
  // Whether the sampler can continue an epoch from a position in its
  // sample order (start_epoch_at()); one that cannot only resumes at
  // another size from an epoch's start.
  virtual bool can_reshard() const { return false; }
  // From now on, epoch `epoch`'s batches cover its sample order from
  // position `start` on (the samples before it were seen, by a run of
  // another size); other epochs are whole. Throws bagua::Error when the
  // sampler cannot (can_reshard() is false and start > 0).
  virtual void start_epoch_at(int64_t epoch, int64_t start);
  // The position in epoch `epoch`'s sample order reached once every rank
  // has done `batches` batches of it: the samples of all ranks so far,
  // counted once (the epoch's end once every batch is done); nothing when
  // the sampler has no such order (variable batches).
  virtual std::optional<int64_t> position(int64_t epoch, int64_t batches) const;
  // Samples in one step on all ranks together (the last step of an epoch
  // may hold fewer); for variable batches the most.
  virtual int64_t global_batch() const = 0;
  // What rank `rank`'s loss in batch `b` of `epoch` is multiplied by before
  // backward so that the ranks' averaged gradient is the mean over the
  // step's samples when the ranks' batches differ in size (a global batch
  // the world size does not divide); 1 otherwise.
  virtual double loss_weight(int64_t /*epoch*/, int64_t /*b*/, int /*rank*/) const { return 1.0; }
};

// The sampler `spec.sampler` names over `train` for `num_replicas` ranks:
//   distributed      DistributedSampler, batches of spec.batch_size; with
//                    `global_batch` > 0, steps of global_batch samples
//                    shared out as evenly as the ranks allow (their batches
//                    then differ by at most one sample: loss_weight())
//   load_balancing   LoadBalancingDistributedSampler over
//                    train.complexities(), batches of spec.batch_size, or,
//                    with sampler.batch_complexity, the batch sampler with
//                    batches_within_budget (drop_last is then the batch
//                    sampler's).
// The last batch of an epoch may be smaller (never dropped by the trainer).
// Throws a user Error when load_balancing is asked for and `train` has no
// complexities (it was loaded without load_options_for(spec)).
// `global_batch` (train.global_batch_size) must be at least num_replicas;
// load_balancing needs it divisible by num_replicas (a user Error names
// the world sizes that work).
std::unique_ptr<Sampler> make_sampler(const DataSpec& spec, const Dataset& train, int num_replicas,
                                      int64_t global_batch = 0);

// Splits `indices` into consecutive batches of `batch_size`; the last batch
// is smaller when the size does not divide, or dropped with drop_last.
// Throws InvalidArgument for batch_size < 1.
std::vector<std::vector<int64_t>> make_batches(const std::vector<int64_t>& indices,
                                               int64_t batch_size, bool drop_last = false);

}  // namespace bagua
