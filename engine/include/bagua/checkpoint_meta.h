// A checkpoint's meta.json, in one place: what a checkpoint says about
// itself, typed, with its JSON both ways. save_checkpoint() writes it last
// (its presence marks a checkpoint complete), a resume reads it back through
// these types; nothing else spells its keys. docs/run.md describes the file.
//
// Contract:
//   - checkpoint_meta_from_json() accepts every meta.json bagua has written: keys added
//     later (epoch_start, files, data, progress, provenance,
//     tuned_bucket_bytes, finished, best) are optional and read as absent when missing.
//     What a resume cannot do without (the position, the world size, the
//     optimizer count, a "files" list of the right shape) throws
//     CheckpointMetaError saying which key is wrong; nothing else throws.
//   - to_json(checkpoint_meta_from_json(j)) keeps every key bagua reads; unknown keys are
//     dropped.
#pragma once

#include <bagua/recipe_spec.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace bagua {

// Where training stands: what a checkpoint continues from.
struct TrainingPosition {
  int64_t step = 0;            // optimizer steps done
  int64_t epoch = 0;           // 0-based epoch in progress
  int64_t batch_in_epoch = 0;  // batches of that epoch already done
  // Where in the epoch's sample order those batches began: 0, or the
  // position a resume at another size continued from (Sampler::start_epoch_at).
  int64_t epoch_start = 0;
};

// The learning-rate schedule's units: the run's first global batch and steps
// per epoch. Once a run changed size (by_samples), its schedule follows the
// samples seen in those units. total_steps is the schedule's length (not
// saved: each run recomputes it from its recipe).
struct ScheduleUnits {
  int64_t global_batch = 0, steps_per_epoch = 0;
  bool by_samples = false;
  int64_t total_steps = 0;
};

// A file of the checkpoint with its size and CRC-32 (zlib's, 8 hex digits).
struct CheckpointFile {
  std::string name;
  uint64_t bytes = 0;
  std::string crc32;
};

// What checkpoint.keep_best or train.early_stop has seen of the evaluations
// by its goal: the best so far, and the evaluations since it that did not
// improve on it, which a resumed run goes on from.
struct BestEvaluation {
  EvalGoal goal;
  double value = std::numeric_limits<double>::quiet_NaN();  // NaN: no evaluation yet (null in meta.json)
  int64_t step = 0;
  int64_t epoch = 0;  // 1-based, as in metrics.jsonl
  // Evaluations after the best without an improvement (all of them, with none yet).
  int64_t evaluations_since = 0;
};

struct CheckpointMeta {
  TrainingPosition position;
  int world_size = 0;
  std::string recipe;          // the recipe's name
  std::string algorithm;       // algorithm.name
  nlohmann::json algorithm_kwargs = nlohmann::json::object();
  int64_t optimizers = 0;      // how many optimizer-I.pt files
  // Every file with its sum; empty with has_files false for checkpoints
  // written before the sums (then model.pt must exist).
  bool has_files = false;
  std::vector<CheckpointFile> files;
  // What decides the batches (train::data_plan()); null: not recorded.
  nlohmann::json data_plan;
  // "progress": the global batch the checkpoint's run took, where the
  // position lies in the epoch's sample order, the schedule's units
  // (absent in checkpoints from before a resize was possible).
  std::optional<int64_t> global_batch;
  std::optional<int64_t> epoch_position;
  std::optional<ScheduleUnits> schedule;
  // The learning-rate schedule's length (steps) in the run that wrote it,
  // so that a run resumed with another length can say its rate follows a
  // new curve; 0: not recorded.
  int64_t schedule_steps = 0;
  nlohmann::json provenance;   // the run's provenance.json; null: not recorded
  int64_t tuned_bucket_bytes = 0;  // bucket_size: auto's choice; 0: none
  // The run's final state: written when training ended (not by a stop),
  // so a later run of the same recipe knows there is nothing left to do.
  bool finished = false;
  // "best": checkpoint.keep_best's and train.early_stop's state at the
  // checkpoint's step; absent when the run had neither.
  std::optional<BestEvaluation> keep_best, early_stop;
  // "loss_scale": train.precision fp16's scale and the steps in a row
  // without an overflow (train/loss_scaler.h); absent under fp32 and bf16.
  std::optional<double> loss_scale;
  int64_t loss_scale_growth_tracker = 0;

  const CheckpointFile* file(const std::string& name) const;
};

class CheckpointMetaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

nlohmann::json to_json(const CheckpointMeta& meta);
CheckpointMeta checkpoint_meta_from_json(const nlohmann::json& j);  // throws CheckpointMetaError
// Parses meta.json's text (CheckpointMetaError when it is not JSON).
CheckpointMeta parse_checkpoint_meta(const std::string& text);

// What decides the batches of an epoch: data.batch_size, data.sampler,
// data.train and the number of training samples (meta.json's "data"); a
// resume compares it (check_data_plan).
nlohmann::json data_plan(const Recipe& recipe, int64_t train_samples);

// Throws a user Error listing what differs between the checkpoint's data
// plan (`saved`, null for checkpoints older than this check) and `now`,
// unless `allow` (checkpoint.allow_data_change), which only warns. With
// `reshards` (the sampler continues an epoch from a position in its order,
// Sampler::can_reshard()) another data.batch_size is not a change of
// meaning: the resume re-shards from the saved position.
void check_data_plan(const nlohmann::json& saved, const nlohmann::json& now, const std::string& where, bool allow,
                     bool reshards = false);

// The per-worker batch size a data plan records (`fallback` when it has none).
int64_t data_plan_batch_size(const nlohmann::json& plan, int64_t fallback);

}  // namespace bagua
