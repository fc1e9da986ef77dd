// The Worker behind run_worker() (bagua/trainer.h): one rank of `bagua
// run`, its state and its parts in the order run() calls them. What comes
// before the loop (joining, resuming, wrapping, planning the steps, the
// first lines) is worker_setup.cpp; the loop and what ends a run is
// trainer.cpp. What surrounds them lives in files of its own: the worker's
// environment and options (worker_environment.h, worker_options.h), the
// stop vote (stop_vote.h), the non-finite guard (nonfinite_guard.h), the
// metrics window (metrics_window.h), the ranks' average and final agreement
// (replicas.h), checkpoints (checkpoint.h), where a resume continues and how
// many steps a run has (resume.h), the first lines (run_banner.h),
// evaluation (evaluation.h), what evaluations decide (best_model.h,
// early_stop.h) and the faults tests plant (test_faults.h).
#pragma once

#include <bagua/algorithms/catalog.h>
#include <bagua/checkpoint_meta.h>
#include <bagua/data.h>
#include <bagua/distributed.h>
#include <bagua/trainer.h>

#include "train/allocation_counter.h"
#include "data/batch_loader.h"
#include "train/best_model.h"
#include "train/checkpoint.h"
#include "train/components.h"
#include "train/early_stop.h"
#include "train/loss_scaler.h"
#include "train/metrics_window.h"
#include "train/nonfinite_guard.h"
#include "train/progress_reporter.h"
#include "train/replicas.h"
#include "train/resume.h"
#include "train/run_log.h"
#include "train/sample_record.h"
#include "train/step_trace.h"
#include "train/stop_vote.h"
#include "train/test_faults.h"
#include "train/worker_environment.h"

#include <nlohmann/json.hpp>
#include <torch/script.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bagua::train {

// One worker's run, in the order run() calls its parts. Work that runs
// beside training (an algorithm's background communication) is paused
// around evaluation and checkpoints (side_work_begin/end).
class Worker {
 public:
  explicit Worker(const Recipe& recipe) : recipe_(recipe) {}

  TrainOutcome run() {
    setup();               // device, group, model, data, optimizers
    resume();              // the checkpoint to continue from, or a clean directory
    wrap();                // with_bagua and the algorithm (broadcasts rank 0's state)
    restore_rank_state();  // this rank's own part of the checkpoint
    plan();                // sampler, steps, log, the lines the user reads first
    loop();
    finish();              // final evaluation, agreement check, final checkpoint, model.pt
    return outcome_;
  }

 private:
  void setup();
  void resume();
  void set_earlier_checkpoints_aside();
  void wrap();
  void restore_rank_state();
  void plan();
  void count_steps();
  void open_log();
  void make_guard();
  void announce();
  void loop();
  // One optimizer step on batch `b` of `epoch`.
  void train_step(int64_t epoch, int64_t b, const std::vector<int64_t>& samples);
  void set_learning_rates(int64_t epoch, int64_t b);
  // The learning-rate schedule's length: the run's steps, or, once a
  // resize made it follow the samples seen, the units' total.
  int64_t schedule_steps() const;
  void after_step(int64_t epoch, int64_t b, bool epoch_ends);
  void stop_at(const Position& at);
  bool stop_due();
  void before_collective();
  void finish();
  void evaluate(int64_t epoch);
  void save(const Position& at);
  void record_window(int64_t epoch);
  void report_autotune();
  void report_final_agreement();
  void write_model();
  RankState rank_state();
  void side_work_begin() { ddp_->pause_background(); }
  void side_work_end() {
    if (!finishing_) ddp_->resume_background();
  }
  void phase(Phase p, const char* label = nullptr) {
    if (progress_) progress_->phase(p);
    trace_->phase(label ? label : phase_name(p));
  }

  const Recipe& recipe_;
  const AlgorithmDescriptor* algorithm_ = nullptr;
  WorkerEnvironment env_;
  nlohmann::json provenance_;  // provenance.json: what made this run
  // Ranks hold different weights (per-rank algorithms, or rank-local
  // ignored parameters): checkpoints then keep each rank's own.
  bool per_rank_model_ = false;
  std::filesystem::path out_dir_, ckpt_dir_;
  torch::jit::Module module_;
  std::shared_ptr<Dataset> train_data_, eval_data_;
  NamedTensors params_, buffers_;
  BuiltOptimizers built_;
  // Declared before the module, so it outlives the module's callbacks into it.
  std::unique_ptr<StepTrace> trace_ = std::make_unique<StepTrace>();
  std::shared_ptr<BaguaModule> ddp_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<data::BatchLoader> loader_;  // the training batches, loaded ahead of the step
  std::unique_ptr<RunLog> log_;
  std::unique_ptr<StopVote> stop_vote_;
  std::unique_ptr<NonFiniteGuard> guard_;
  std::unique_ptr<MetricsWindow> window_;
  DivergenceWatch divergence_;
  std::unique_ptr<ReplicaAverage> average_;
  std::unique_ptr<TestFaults> faults_;  // null unless a test plants one
  std::unique_ptr<AllocationCounter> allocations_;  // null unless BAGUA_COUNT_ALLOCATIONS is set
  std::unique_ptr<ProgressReporter> progress_;  // step and phase, for bagua run's stall watch
  std::unique_ptr<BestModel> best_;          // checkpoint.keep_best, or null
  std::unique_ptr<EarlyStop> early_stop_;    // train.early_stop, or null
  std::unique_ptr<LossScaler> scaler_;       // train.precision: fp16, or null
  Position pos_;
  TrainOutcome outcome_;
  int64_t per_epoch_ = 0, total_ = 0, last_eval_step_ = -1;
  int64_t schedule_steps_before_ = 0;  // the checkpoint's (resume): 0 unknown
  bool finishing_ = false;                 // training is over: background work stays stopped
  std::optional<Resize> resized_;          // a resume at another world size or global batch
  std::optional<ScheduleUnits> schedule_;  // from the checkpoint; else this run's, once planned
  std::unique_ptr<SampleRecord> sample_record_;  // BAGUA_RECORD_SAMPLES (a testing aid), or null
  int64_t tuned_bucket_bytes_ = 0;  // bucket_size: auto's choice (once made, or from the checkpoint)
  std::optional<double> grad_norm_;  // the last computed global gradient norm (before clipping)
  // Micro-batches per step: train.grad_accum_steps, or after a resume at
  // another world size the count that keeps the checkpoint's global batch
  // (accum_before_: the recipe's, when it was changed; 0 when not).
  int64_t accum_ = 1, accum_before_ = 0;
  std::unique_ptr<Sampler> sampler_for(int64_t accum) const;
};

}  // namespace bagua::train
