// metrics.jsonl, the record of a run, in one place: every kind of record
// with its JSON both ways. Rank 0 of `bagua run` writes one JSON object per
// line (train/run_log.cpp); `bagua report`, the TensorBoard writer and the
// tests read them back through these types. docs/metrics.md lists the
// fields; they are stable (a reader ignores keys it does not know).
//
// A line is one of:
//   StepRecord      a log window of training steps   (has "loss")
//   EvalRecord      an evaluation                    (has "eval_loss")
//   ResumeRecord    the run resumed from a checkpoint (has "resumed_from")
//   AutotuneRecord  bucket_size: auto's choice       (has "autotune")
//   MemoryRecord    each worker's peak memory        (has "peak_rss_bytes")
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace bagua::metrics {

struct StepRecord {
  int64_t step = 0;          // optimizer steps done
  int64_t epoch = 0;         // 1-based
  double loss = 0;           // mean over the ranks and the steps since the last record (NaN: null)
  double lr = 0;             // of the first optimizer
  double samples_per_s = 0;  // all ranks together, since the last record
  double time = 0;           // seconds since the run (or this resume) started
  int64_t comm_bytes = 0;    // bytes rank 0 sent for the algorithm since the last record
  std::optional<int64_t> nonfinite_skips;  // under train.on_nonfinite: skip_step, steps skipped so far
  std::optional<int64_t> skipped_images;   // under skip_unreadable: samples replaced so far (this rank's)
  std::optional<double> loss_scale;        // under train.precision: fp16: the current loss scale
  std::optional<int64_t> overflow_skips;   // under fp16: steps skipped for overflowed gradients so far
  std::optional<double> grad_norm;         // the record's step: the gradients' global L2 norm, before clipping
  std::optional<double> padding;  // padded token sequences: the share of input elements that were padding
  std::vector<double> lrs;  // every optimizer's lr, in recipe order, when there are several (else empty)
  bool diverging = false;   // the loss rose far above its best (docs/run.md); "diverging": true only when set
};

struct EvalRecord {
  int64_t step = 0;
  int64_t epoch = 0;
  double eval_loss = 0;
  std::optional<double> eval_accuracy;  // classification only
  int64_t eval_samples = 0;
  double time = 0;
  std::optional<double> eval_perplexity;  // exp(eval_loss): cross_entropy over token sequences only
  // checkpoint.keep_best: the figure by which this evaluation is the best
  // so far ("eval_loss"); its model was kept in OUTPUT/best/. Empty: not.
  std::string best;
  bool early_stop = false;  // train.early_stop ended the run after this evaluation
};

// An evaluation's figure by its name in the record ("eval_loss",
// "eval_accuracy", "eval_perplexity"), or nothing when the record has none
// of that name.
std::optional<double> eval_figure(const EvalRecord& r, const std::string& name);

struct ResumeRecord {
  int64_t step = 0;           // the step the run continues from
  std::string resumed_from;   // the checkpoint directory
  // A resume at another size ("resized" in the JSON; all 0 otherwise): the
  // world size and global batch before and now, and the position in the
  // epoch's sample order the run continues from.
  int64_t previous_world_size = 0, world_size = 0;
  int64_t previous_global_batch = 0, global_batch = 0;
  int64_t epoch = 0;           // 1-based epoch the position is in
  int64_t epoch_position = 0;  // samples of that epoch already seen
  // Steps past the checkpoint that the run before had logged, done again
  // now (at least: steps after its last record are not known); 0: none.
  int64_t redone_steps = 0;
  // Their samples (redone_steps x the run before's global batch); 0: none.
  int64_t redone_samples = 0;
  // The launcher's restart count (TORCHELASTIC_RESTART_COUNT: a
  // max_restarts restart, an elastic round of bagua's agent or torchrun);
  // 0: none.
  int64_t restart = 0;
  // Nodes the run continues on (WORLD_SIZE / LOCAL_WORLD_SIZE), written
  // with a restart or a resize; 0: not known.
  int64_t nodes = 0;
};

struct AutotuneRecord {
  struct Trial {
    int64_t bucket_bytes = 0;
    int64_t buckets = 0;
    double step_s = 0;  // median step time of the slowest rank
  };
  int64_t step = 0;
  int64_t bucket_bytes = 0;  // the size chosen
  std::vector<Trial> trials;
};

struct MemoryRecord {
  int64_t step = 0;
  std::vector<int64_t> peak_rss_bytes;  // per rank
};

using Record = std::variant<StepRecord, EvalRecord, ResumeRecord, AutotuneRecord, MemoryRecord>;

nlohmann::json to_json(const Record& record);

// One line of metrics.jsonl (already parsed): the record it holds, or
// nothing for an object of a kind this version does not know. Throws
// bagua::Error (a user error) whose message starts with `where` for a
// record missing a field or holding one of the wrong type: "WHERE: this
// record has no \"time\"", "WHERE: \"loss\" is not a number", "WHERE: this
// record has no integer \"step\"". A null number reads as NaN.
std::optional<Record> record_from_json(const nlohmann::json& object, const std::string& where);

// Every record of a metrics.jsonl file, in file order (blank lines and
// records of unknown kinds skipped). Throws bagua::Error (a user error)
// naming PATH:LINE for a line that is not a JSON object or a malformed
// record, and naming PATH when it cannot be read.
std::vector<Record> read_metrics_file(const std::string& path);

// The TensorBoard tags and values of a record (docs/metrics.md lists them);
// empty for the kinds TensorBoard does not show.
std::vector<std::pair<std::string, double>> tensorboard_scalars(const Record& record);

}  // namespace bagua::metrics
