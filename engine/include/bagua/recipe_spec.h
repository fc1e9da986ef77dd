// The typed recipe: plain values, every default filled, that every layer
// reads (the data pipeline its DataSpec, the trainer its TrainSpec, the
// launcher its DistributedSpec, ...). Only the recipe layer makes one
// (load_recipe(), bagua/recipe.h), after checking it; no other layer
// parses YAML or re-checks a value found here.
#pragma once

#include <bagua/defaults.h>

#include <nlohmann/json.hpp>

#include <array>
#include <map>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bagua {

// One finding about a recipe, at the place it was written.
struct Diagnostic {
  std::string file;      // as the user named it (or "--set KEY=VALUE" for an override)
  int line = 0;          // 1-based; 0 when unknown
  int column = 0;        // 1-based; 0 when unknown
  std::string key_path;  // e.g. "optimizers[0].lr"; empty for the whole file
  std::string message;   // what is wrong, with what was expected and what was found

  // "FILE:LINE:COL: key.path: message".
  std::string to_string() const;
};

enum class Loss { kCrossEntropy, kNll, kMse, kL1, kBceWithLogits, kModel };
enum class DataFormat { kIdx, kCsv, kJsonl, kTensors, kTokens, kImageFolder };
enum class SamplerType { kDistributed, kLoadBalancing };
enum class OptimizerType { kSgd, kAdam, kAdamW, kRmsprop, kAdagrad, kQAdam };
enum class SchedulerType { kConstant, kStep, kCosine, kLinear };
enum class Backend { kAuto, kGloo, kNccl };
enum class Device { kAuto, kCpu, kCuda };
enum class OnNonFinite { kStop, kSkipStep };
enum class Precision { kFp32, kBf16, kFp16 };  // train.precision
enum class EvalMetric { kEvalLoss, kEvalAccuracy, kEvalPerplexity };  // as metrics.jsonl names them
enum class MetricMode { kMin, kMax };

// The recipe spelling of each enumerator ("cross_entropy", "idx", ...).
const char* to_string(Loss v);
const char* to_string(DataFormat v);
const char* to_string(SamplerType v);
const char* to_string(OptimizerType v);
const char* to_string(SchedulerType v);
const char* to_string(Backend v);
const char* to_string(Device v);
const char* to_string(OnNonFinite v);
const char* to_string(EvalMetric v);
const char* to_string(MetricMode v);

// True for losses whose targets are class indices: their evaluations also
// measure eval_accuracy.
bool is_classification(Loss loss);

// model:
struct ModelSpec {
  std::string torchscript;                 // absolute path
  std::vector<std::string> ignore_params;  // "{module}.{param}" globs
  Loss loss = Loss::kCrossEntropy;
};

// A column of a CSV file, by header name or by 0-based index; in
// input_columns and exclude_columns also a range of indices ("1-784": from
// `index` to `last`, both included).
struct ColumnRef {
  std::string name;    // set when named
  int64_t index = -1;  // set (>= 0) when given by position; a range's first column
  int64_t last = -1;   // a range's last column (>= index); -1: not a range
};

// A data source's normalize {mean, std}: each input value x becomes
// (x - mean) / std. One value applies to every input value; a list holds
// one value per entry of the sample's first dimension (a flat CSV sample:
// per input column; an image [C, H, W]: per channel). Empty: none.
struct MeanStd {
  std::vector<double> mean;
  std::vector<double> std;
  bool empty() const { return mean.empty(); }
};

// data.train / data.eval. Only the fields of `format` are meaningful.
struct DataSource {
  DataFormat format = DataFormat::kIdx;
  std::vector<int64_t> input_shape;  // empty: flat
  // idx
  std::string images;  // absolute path
  std::string labels;  // absolute path
  bool normalize = true;  // pixels / 255
  // idx, csv: normalize's {mean, std} (idx: after the / 255)
  MeanStd mean_std;
  // csv, jsonl, tensors: the file; image_folder: the root directory
  std::string path;  // absolute path
  // csv
  ColumnRef target_column;
  // empty: every column but the target and the sampler's complexity column
  std::vector<ColumnRef> input_columns;
  std::vector<ColumnRef> exclude_columns;  // taken out of the input columns
  bool header = true;
  char delimiter = ',';
  // jsonl
  std::string input_field = "input";
  std::string target_field = "target";
  int64_t pad_value = 0;
  std::optional<int64_t> max_length;
  // tensors
  std::string input_key = "input";
  std::string target_key = "target";
  // tokens: the shard files as written (absolute; a pattern may hold the
  // wildcards * ? [...], expanded in sorted order when the data is opened)
  std::vector<std::string> shards;
  int64_t token_bytes = 2;  // dtype: uint16 (2) or uint32 (4)
  int64_t context = 0;      // tokens per sample's input
  int64_t stride = 0;       // tokens between samples' starts (0: context)
  std::optional<int64_t> vocab_size;
  // image_folder (input_shape is [C, H, W]; mean_std as idx's, after / 255)
  int64_t resize = 0;                  // shorter side before the centre crop; 0: just cover
  bool random_flip = false;            // training only
  std::optional<int64_t> crop_padding; // random_crop.padding; nullopt: no random crop
  bool skip_unreadable = false;
};

// data.sampler
struct SamplerSpec {
  SamplerType type = SamplerType::kDistributed;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  std::string complexity_field;  // load_balancing only
  double random_level = 0.0;     // load_balancing only
  std::optional<int64_t> batch_complexity;  // load_balancing only: variable-size batches under this budget
};

// A server of the dataset cache (data.cache.hosts), host and port.
struct CacheHost {
  std::string host;
  int port = 0;
};

// data.cache
struct CacheSpec {
  std::string backend = "redis";
  std::string dataset_name;
  int64_t writer_buffer_size = 20;
  std::vector<CacheHost> hosts;  // empty: spawn a server per node
  bool cluster_mode = true;
  int64_t capacity_per_node = 100000000;  // bytes
};

struct DataSpec {
  DataSource train;
  std::optional<DataSource> eval;
  int64_t batch_size = 64;  // per worker
  SamplerSpec sampler;
  std::optional<CacheSpec> cache;
  // Threads that load (decode, augment) batches ahead of the training step;
  // nullopt: auto (docs/data.md), 0: the step loads its own batch.
  std::optional<int64_t> loader_threads;
};

// optimizers[i]. Only the hyperparameters of `type` are meaningful; the
// others keep the values below.
struct OptimizerSpec {
  OptimizerType type = OptimizerType::kSgd;
  double lr = 0.0;
  std::vector<std::string> params{"*"};  // parameter-name globs
  bool fused = false;
  double weight_decay = 0.0;
  double momentum = 0.0;     // sgd, rmsprop
  double dampening = 0.0;    // sgd
  bool nesterov = false;     // sgd
  std::array<double, 2> betas{0.9, 0.999};  // adam, adamw, qadam
  double eps = 1e-8;         // adam, adamw, rmsprop, adagrad, qadam
  bool amsgrad = false;      // adam, adamw
  double alpha = 0.99;       // rmsprop
  bool centered = false;     // rmsprop
  double lr_decay = 0.0;     // adagrad
  double initial_accumulator_value = 0.0;  // adagrad
  int64_t warmup_steps = 100;  // qadam
};

// scheduler
struct SchedulerSpec {
  SchedulerType type = SchedulerType::kConstant;
  int64_t warmup_steps = 0;
  int64_t step_size = 0;              // step
  double gamma = 0.1;                 // step
  std::optional<int64_t> total_steps; // cosine, linear; empty: the whole run
  double min_lr = 0.0;                // cosine
  double end_factor = 0.0;            // linear
};

// algorithm: the name and keyword arguments for the algorithm registry.
struct AlgorithmSpec {
  std::string name = "gradient_allreduce";
  bool flatten = true;                   // with_bagua's do_flatten
  int64_t bucket_size = kDefaultBucketBytes;
  bool bucket_size_auto = false;  // bucket_size: auto (WithBaguaOptions::autotune_buckets)
  // The algorithm's own keyword arguments with every default filled
  // (e.g. {"hierarchical": false, "average": true}); no name/flatten/bucket_size.
  nlohmann::json kwargs = nlohmann::json::object();
};

// distributed: what the launcher needs.
struct DistributedSpec {
  Backend backend = Backend::kAuto;
  int nproc_per_node = 1;
  int nnodes = 1;
  // nnodes "MIN:MAX" (a string, MIN == MAX allowed): an elastic job. Its
  // nodes meet in rounds on the store at master_addr:master_port and take
  // their ranks in order of arrival (node_rank is not used); nnodes is MIN.
  // 0: a fixed job of nnodes nodes, each given its node_rank.
  int nnodes_max = 0;
  bool elastic() const { return nnodes_max > 0; }
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::optional<int> master_port;  // null: a free port on one node, kDefaultMasterPort across nodes
  static constexpr int kDefaultMasterPort = 29500;
  int master_port_or_default() const { return master_port.value_or(kDefaultMasterPort); }
  int timeout_s = 300;
  int stall_warning_s = 60;  // warn about a worker without progress this long; 0: never
  int max_restarts = 0;
  // After Ctrl-C, SIGTERM or SIGUSR1: how long the workers have to reach a
  // step boundary and write their checkpoint before they are killed.
  int stop_grace_s = 30;
  // Elastic jobs: a round with at least MIN nodes closes after this many
  // seconds without a new arrival (at once with MAX).
  int rdzv_last_call_s = 10;
};

// train.eval_every
struct EvalSchedule {
  enum class Kind { kEpoch, kNever, kSteps };
  Kind kind = Kind::kEpoch;
  int64_t steps = 0;  // kSteps only
};

// What checkpoint.keep_best and train.early_stop judge an evaluation by: a
// figure of its record and which way is better.
struct EvalGoal {
  EvalMetric metric = EvalMetric::kEvalLoss;
  MetricMode mode = MetricMode::kMin;  // unwritten in a recipe: default_mode(metric)
};

// The better direction of a figure: max for eval_accuracy, min for eval_loss
// and eval_perplexity.
MetricMode default_mode(EvalMetric metric);

// train.early_stop
struct EarlyStopSpec {
  EvalGoal goal;
  int64_t patience = 1;  // evaluations in a row without an improvement that end the run
  double min_delta = 0;  // the least change toward goal.mode that is an improvement
};

struct TrainSpec {
  int64_t epochs = 1;
  std::optional<int64_t> max_steps;
  // Samples per step on all workers together, whatever the world size: the
  // per-worker training batch follows it (data.batch_size then sizes only
  // evaluation batches). Empty: data.batch_size per worker.
  std::optional<int64_t> global_batch_size;
  uint64_t seed = 0;
  int64_t log_every_steps = 50;
  EvalSchedule eval_every;
  std::optional<int> threads;  // empty: cores / local workers
  bool tuned_allocator = true;  // train.allocator: tuned (see train/allocator_policy.h) or system
  Device device = Device::kAuto;  // auto: this worker's GPU when there is one
  OnNonFinite on_nonfinite = OnNonFinite::kStop;
  int64_t grad_accum_steps = 1;         // micro-batches per optimizer step
  std::optional<double> clip_grad_norm;  // the gradients' global L2 norm is kept at most this
  // train.precision: the forward pass and the loss in autocast (bf16, or
  // fp16 with dynamic loss scaling: train/loss_scaler.h), or fp32.
  Precision precision = Precision::kFp32;
  std::optional<EarlyStopSpec> early_stop;  // empty: train to epochs or max_steps
};

// The data a worker takes per optimizer step: data.batch_size x
// train.grad_accum_steps samples (its micro-batches), sampled as one batch.
inline DataSpec data_per_step(const DataSpec& data, const TrainSpec& train) {
  DataSpec d = data;
  d.batch_size *= train.grad_accum_steps;
  return d;
}

struct CheckpointSpec {
  std::optional<int64_t> every_steps;  // empty: at the end of each epoch
  int64_t keep = 3;
  bool allow_data_change = false;  // resume even when the batches would differ
  bool allow_model_change = false;   // resume even when the model file's SHA-256 differs
  bool allow_recipe_change = false;  // resume even when the recipe's meaning differs
  std::string resume = "auto";  // "auto", "never", or an absolute path
  // The best evaluation's model is kept in OUTPUT/best/; empty: none.
  std::optional<EvalGoal> keep_best;
};

struct OutputSpec {
  std::string dir;  // as written (relative to the working directory); default runs/<name>
  bool trace = false;  // per-step Chrome trace of each rank, trace/rank-N.json
  int64_t trace_from_step = 6;  // the first traced step (from 1)
  int64_t trace_steps = 20;
  bool tensorboard = false;  // rank 0 also writes TensorBoard event files, tensorboard/events.out.tfevents.*
};

// Where a written value came from.
struct SourceLocation {
  std::string file;  // as named; "--set KEY=VALUE" for an override
  int line = 0;      // 1-based; 0 when unknown
  int column = 0;
  std::string to_string() const;  // "FILE:LINE:COL", or FILE alone
};

// What went into a recipe (recorded in provenance.json).
struct RecipeOrigin {
  struct File {
    std::string path;    // as named (bases relative to the working directory)
    std::string sha256;  // of the file's bytes
  };
  std::vector<File> files;             // the recipe, then its bases, in reading order
  // A base whose bytes no longer match the sha256 its extends entry pins:
  // refused, unless loaded with RecipeLoadOptions::allow_stale_pins.
  struct StalePin {
    std::string base;      // the base file, as named
    std::string pinned;    // the file SHA-256 the entry pins
    std::string current;   // the file SHA-256 of its bytes now
    SourceLocation where;  // the entry's sha256 value
  };
  std::vector<StalePin> stale_pins;
  std::vector<std::string> overrides;  // the --set list, in order
  std::vector<std::string> env_names;  // variables ${...} referenced, sorted (values never kept)
  // Where each written value was set, by key path ("data.batch_size",
  // "optimizers[0].lr"); a path absent here was filled by a default.
  std::map<std::string, SourceLocation> values;
  // Keys whose values name files (model.torchscript, data.train.images, ...).
  std::vector<std::string> file_keys;
};

// The recipe schema this bagua reads (`schema_version:` in recipes).
inline constexpr int kRecipeSchemaVersion = 2;

// A valid recipe with every default filled and every path made absolute.
struct Recipe {
  std::string name;
  std::string description;  // one line, shown wherever recipes are listed
  std::string source;  // the recipe file as it was named
  RecipeOrigin origin;
  ModelSpec model;
  DataSpec data;
  std::vector<OptimizerSpec> optimizers;
  SchedulerSpec scheduler;
  AlgorithmSpec algorithm;
  DistributedSpec distributed;
  TrainSpec train;
  CheckpointSpec checkpoint;
  OutputSpec output;
  // The resolved tree (extends merged, overrides applied, defaults filled).
  nlohmann::json resolved;
  // Decisions taken for the user that they should know about (e.g.
  // algorithm.flatten turned off because an optimizer is fused).
  std::vector<Diagnostic> notes;
};

// The enumerator a recipe spelling names (the inverse of to_string), or
// nothing for a spelling of none of them.
template <typename Enum>
std::optional<Enum> enum_from_string(std::string_view text);
// Declared here, as they are read outside the recipe layer too (meta.json).
template <>
std::optional<EvalMetric> enum_from_string<EvalMetric>(std::string_view text);
template <>
std::optional<MetricMode> enum_from_string<MetricMode>(std::string_view text);

}  // namespace bagua
