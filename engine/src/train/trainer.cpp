// run_worker(): one rank of `bagua run`. The loop is Worker::loop() and
// Worker::train_step(); what surrounds it lives in its own file: the
// worker's environment (worker_environment.h), the stop vote
// (stop_vote.h), the non-finite guard (nonfinite_guard.h), the metrics
// window (metrics_window.h), the ranks' average and final agreement
// (replicas.h), checkpoints (checkpoint.h), evaluation (evaluation.h) and
// the faults tests plant (test_faults.h).
#include <bagua/algorithms/q_adam.h>
#include <bagua/algorithms/registry.h>
#include <bagua/communication.h>
#include <bagua/data.h>
#include <bagua/distributed.h>
#include <bagua/errors.h>
#include <bagua/metrics.h>
#include <bagua/system.h>
#include <bagua/trainer.h>

#include "train/checkpoint.h"
#include "train/components.h"
#include "train/evaluation.h"
#include "train/metrics_window.h"
#include "train/allocation_counter.h"
#include "train/nonfinite_guard.h"
#include "train/progress_reporter.h"
#include "train/replicas.h"
#include "train/run_log.h"
#include "train/run_provenance.h"
#include "train/step_trace.h"
#include "train/stop_vote.h"
#include "train/allocator_policy.h"
#include "train/test_faults.h"
#include "train/worker_environment.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>

#include <fcntl.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace bagua {

void check_supported(const Recipe& recipe) {
  auto unsupported = [](const std::string& key, const std::string& what) {
    throw Error(key + ": " + what + " is not implemented in this version of bagua yet", true);
  };
  const AlgorithmDescriptor* algorithm = find_algorithm(recipe.algorithm.name);
  if (algorithm == nullptr || !algorithm_implemented(algorithm->name)) {
    unsupported("algorithm.name", "algorithm '" + recipe.algorithm.name + "'");
  }
  if (recipe.train.device == Device::kCuda && torch::cuda::device_count() == 0) {
    train::choose_device(Device::kCuda, 0);  // throws the no-GPU error
  }
}

void check_data(const Recipe& recipe, SharedData* share) {
  check_dataset(recipe.data.train, target_kind_for(recipe.model.loss), load_options_for(recipe.data), share);
  if (recipe.data.eval) check_dataset(*recipe.data.eval, target_kind_for(recipe.model.loss), {}, share);
}

namespace {

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
  void wrap();
  void restore_rank_state();
  void plan();
  void loop();
  // One optimizer step on batch `b` of `epoch`.
  void train_step(int64_t epoch, int64_t b, const std::vector<int64_t>& samples);
  void after_step(int64_t epoch, int64_t b, bool epoch_ends);
  void stop_at(const train::Position& at);
  bool stop_due();
  void before_collective();
  void finish();
  void evaluate(int64_t epoch);
  void save(const train::Position& at);
  void record_window(int64_t epoch);
  void report_autotune();
  void report_final_agreement();
  void write_model();
  train::RankState rank_state();
  void decide_resize(const nlohmann::json& meta);
  double schedule_step(int64_t epoch, int64_t b) const;
  nlohmann::json progress(const train::Position& at) const;
  void record_samples(int64_t epoch, const std::vector<int64_t>& samples);
  void side_work_begin() { ddp_->pause_background(); }
  void side_work_end() {
    if (!finishing_) ddp_->resume_background();
  }
  void phase(train::Phase p, const char* label = nullptr) {
    if (progress_) progress_->phase(p);
    trace_->phase(label ? label : train::phase_name(p));
  }

  const Recipe& recipe_;
  const AlgorithmDescriptor* algorithm_ = nullptr;
  train::WorkerEnvironment env_;
  nlohmann::json provenance_;  // provenance.json: what made this run
  // Ranks hold different weights (per-rank algorithms, or rank-local
  // ignored parameters): checkpoints then keep each rank's own.
  bool per_rank_model_ = false;
  fs::path out_dir_, ckpt_dir_;
  torch::jit::Module module_;
  std::shared_ptr<Dataset> train_data_, eval_data_;
  train::NamedTensors params_, buffers_;
  train::BuiltOptimizers built_;
  // Declared before the module, so it outlives the module's callbacks into it.
  std::unique_ptr<train::StepTrace> trace_ = std::make_unique<train::StepTrace>();
  std::shared_ptr<BaguaModule> ddp_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<train::RunLog> log_;
  std::unique_ptr<train::StopVote> stop_vote_;
  std::unique_ptr<train::NonFiniteGuard> guard_;
  std::unique_ptr<train::MetricsWindow> window_;
  train::DivergenceWatch divergence_;
  std::unique_ptr<train::ReplicaAverage> average_;
  std::unique_ptr<train::TestFaults> faults_;  // null unless a test plants one
  std::unique_ptr<train::AllocationCounter> allocations_;  // null unless BAGUA_COUNT_ALLOCATIONS is set
  std::unique_ptr<train::ProgressReporter> progress_;  // step and phase, for bagua run's stall watch
  train::Position pos_;
  TrainOutcome outcome_;
  int64_t per_epoch_ = 0, total_ = 0, last_eval_step_ = -1;
  bool finishing_ = false;          // training is over: background work stays stopped
  // A resume at another world size or global batch (decide_resize()).
  struct Resize {
    int64_t world = 0, global_batch = 0;  // the checkpoint's
    int64_t position = 0;                 // in its epoch's sample order
  };
  std::optional<Resize> resized_;
  // The learning-rate schedule's units: the run's first global batch and
  // steps per epoch. Once a run changed size (by_samples), its schedule
  // follows the samples seen in those units, over total_steps of them
  // (train.epochs of them, or train.max_steps).
  struct ScheduleUnits {
    int64_t global_batch = 0, steps_per_epoch = 0, total_steps = 0;
    bool by_samples = false;
  };
  std::optional<ScheduleUnits> schedule_;  // from the checkpoint; else this run's, once planned
  int sample_log_ = -1;                    // BAGUA_RECORD_SAMPLES's file (a testing aid), or -1
  int64_t logged_before_ = 0;              // rank 0, resumed: the last step metrics.jsonl already had
  int64_t tuned_bucket_bytes_ = 0;  // bucket_size: auto's choice (once made, or from the checkpoint)
};

void Worker::setup() {
  const at::Device device = train::choose_device(recipe_.train.device, train::local_rank_from_env());
  train::JoinOptions join;
  join.backend = recipe_.distributed.backend;
  join.timeout = std::chrono::seconds(recipe_.distributed.timeout_s);
  join.threads = recipe_.train.threads;
  env_ = train::WorkerEnvironment::join(device, join);
  progress_ = std::make_unique<train::ProgressReporter>(env_.rank, env_.world);
  faults_ = train::TestFaults::from_environment(env_.rank);
  allocations_ = train::AllocationCounter::from_environment();
  out_dir_ = recipe_.output.dir;
  ckpt_dir_ = out_dir_ / "checkpoints";
  fs::create_directories(out_dir_);

  torch::manual_seed(recipe_.train.seed);
  module_ = train::load_model(recipe_.model.torchscript, env_.device);
  train_data_ = train::load_training_set(recipe_, /*through_cache=*/true);
  eval_data_ = train::load_eval_set(recipe_, *train_data_);
  params_ = train::named_parameters(module_);
  buffers_ = train::named_buffers(module_);
  built_ = train::build_optimizers(recipe_.optimizers, params_);
  sampler_ = make_sampler(recipe_.data, *train_data_, env_.world, recipe_.train.global_batch_size.value_or(0));

  algorithm_ = find_algorithm(recipe_.algorithm.name);
  per_rank_model_ = !algorithm_->traits.replicas_identical || !recipe_.model.ignore_params.empty();
  // Stop votes on a group of their own.
  ProcessGroupPtr votes = default_group()->duplicate("gloo");
  votes->set_verify_collectives(false);
  stop_vote_ = std::make_unique<train::StopVote>(votes, algorithm_->traits.synchronous);
  average_ = std::make_unique<train::ReplicaAverage>(params_, buffers_, algorithm_->traits.replicas_identical,
                                                     default_group());
}

void Worker::resume() {
  provenance_ = train::gather_provenance(recipe_, env_.rank, env_.world, env_.control);
  if (recipe_.checkpoint.resume == "never") {
    // A fresh run must not mix its checkpoints with an earlier run's: pruning
    // and a later restart would pick the old ones up.
    std::string moved;
    if (env_.rank == 0 && fs::exists(ckpt_dir_) && !fs::is_empty(ckpt_dir_)) {
      fs::path aside = out_dir_ / ("checkpoints-before-" + std::to_string(std::time(nullptr)));
      fs::rename(ckpt_dir_, aside);
      moved = aside.string();
    }
    broadcast_object(moved, 0, default_group());
    if (env_.rank == 0 && !moved.empty()) {
      std::fprintf(stderr, "checkpoint.resume is never: moved the earlier run's checkpoints to %s\n", moved.c_str());
    }
    return;
  }
  std::string explicit_path = recipe_.checkpoint.resume == "auto" ? "" : recipe_.checkpoint.resume;
  nlohmann::json meta;
  auto verify = [this](const std::string& where, const nlohmann::json& saved) {
    train::check_data_plan(saved.value("data", nlohmann::json()), train::data_plan(recipe_, train_data_->size()),
                           where, recipe_.checkpoint.allow_data_change, sampler_->can_reshard());
    train::check_provenance(saved.value("provenance", nlohmann::json()), provenance_, recipe_, where,
                            [this](const std::string& line) {
                              if (env_.rank == 0) std::fprintf(stderr, "%s\n", line.c_str());
                            });
    decide_resize(saved);
  };
  if (auto resumed = train::resume_checkpoint(ckpt_dir_.string(), explicit_path, params_, buffers_,
                                              built_.optimizers, default_group(), &outcome_.resumed_from, &meta,
                                              verify)) {
    pos_ = *resumed;
    if (resized_) pos_ = {pos_.step, pos_.epoch, 0, resized_->position};
    // The epoch continues in the sample order from where its batches began.
    sampler_->start_epoch_at(pos_.epoch, pos_.epoch_start);
    const nlohmann::json units = meta.value("progress", nlohmann::json::object()).value("schedule", nlohmann::json());
    if (units.is_object()) {
      schedule_ = ScheduleUnits{units.value("global_batch", int64_t{0}), units.value("steps_per_epoch", int64_t{0}), 0,
                                units.value("by_samples", false)};
    }
    if (resized_ && schedule_) schedule_->by_samples = true;
    if (meta.contains("tuned_bucket_bytes") && meta["tuned_bucket_bytes"].is_number_integer()) {
      tuned_bucket_bytes_ = meta["tuned_bucket_bytes"].get<int64_t>();
    }
  }
}

// Whether the checkpoint was written at another world size or global batch
// and, if so, where in its epoch's sample order the run continues: the
// samples every rank had taken before the saved step (meta.json's
// "progress"; checkpoints without it: their batches of batch x world).
// Throws (on every rank alike) when the sampler cannot continue there.
void Worker::decide_resize(const nlohmann::json& meta) {
  const int64_t world = meta.at("world_size").get<int64_t>();
  const nlohmann::json progress = meta.value("progress", nlohmann::json::object());
  int64_t global = progress.value("global_batch", int64_t{0});
  if (global <= 0) {
    const nlohmann::json data = meta.value("data", nlohmann::json::object());
    const int64_t batch = data.value("batch_size", recipe_.data.batch_size);
    global = batch * world;
  }
  resized_.reset();
  if (world == env_.world && global == sampler_->global_batch()) return;
  Resize r{world, global, 0};
  const int64_t b = meta.at("batch_in_epoch").get<int64_t>();
  const int64_t start = meta.value("epoch_start", int64_t{0});
  if (progress.contains("epoch_position") && progress["epoch_position"].is_number_integer()) {
    r.position = progress["epoch_position"].get<int64_t>();
  } else {
    r.position = start + b * global;  // every batch before the last is whole
  }
  if (b == 0 && start == 0) r.position = 0;
  if (r.position > 0 && !sampler_->can_reshard()) {
    sampler_->start_epoch_at(meta.at("epoch").get<int64_t>(), r.position);  // throws, saying why
  }
  resized_ = r;
}

// The point of the learning-rate schedule a step is at: the step itself,
// or, once the run has changed size, the samples seen in units of its
// first global batch (whole epochs count as its first steps per epoch).
double Worker::schedule_step(int64_t epoch, int64_t b) const {
  if (!schedule_ || !schedule_->by_samples || schedule_->global_batch <= 0) return static_cast<double>(pos_.step);
  const auto at = sampler_->position(epoch, b);
  if (!at) return static_cast<double>(pos_.step);
  return static_cast<double>(epoch * schedule_->steps_per_epoch) +
         static_cast<double>(*at) / static_cast<double>(schedule_->global_batch);
}

// meta.json's "progress" for a checkpoint at `at`.
nlohmann::json Worker::progress(const train::Position& at) const {
  nlohmann::json p = {{"global_batch", sampler_->global_batch()}};
  if (const auto position = sampler_->position(at.epoch, at.batch_in_epoch)) p["epoch_position"] = *position;
  if (schedule_) {
    p["schedule"] = {{"global_batch", schedule_->global_batch},
                     {"steps_per_epoch", schedule_->steps_per_epoch},
                     {"by_samples", schedule_->by_samples}};
  }
  return p;
}

// BAGUA_RECORD_SAMPLES=FILE (docs/run.md, testing aids): one line per rank
// and step, "RANK STEP EPOCH INDEX...", appended with one write so that the
// ranks' lines do not interleave; rank 0 writes "resume STEP" when a run
// resumes, so a reader drops what the resumed steps replaced.
void Worker::record_samples(int64_t epoch, const std::vector<int64_t>& samples) {
  if (sample_log_ < 0) return;
  std::string line = std::to_string(env_.rank) + " " + std::to_string(pos_.step) + " " + std::to_string(epoch);
  for (int64_t i : samples) line += " " + std::to_string(i);
  line += "\n";
  if (::write(sample_log_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    std::fprintf(stderr, "BAGUA_RECORD_SAMPLES: write failed\n");
  }
}

// The step of the last training record in metrics.jsonl (0 when none, or
// when the file cannot be read: it only feeds a message).
int64_t last_logged_step(const fs::path& metrics) {
  int64_t last = 0;
  try {
    if (!fs::exists(metrics)) return 0;
    for (const auto& record : metrics::read_metrics_file(metrics.string())) {
      if (const auto* s = std::get_if<metrics::StepRecord>(&record)) last = s->step;
      if (std::holds_alternative<metrics::ResumeRecord>(record)) last = std::get<metrics::ResumeRecord>(record).step;
    }
  } catch (const std::exception&) {
    return 0;
  }
  return last;
}

void Worker::wrap() {
  WithBaguaOptions wopts;
  wopts.do_flatten = recipe_.algorithm.flatten;
  wopts.bucket_bytes = recipe_.algorithm.bucket_size;
  if (recipe_.algorithm.bucket_size_auto) {
    // A resumed run keeps the size tuned before; a fresh one tunes.
    if (tuned_bucket_bytes_ > 0) wopts.bucket_bytes = tuned_bucket_bytes_;
    else wopts.autotune_buckets = true;
  }
  wopts.parameters_to_ignore = recipe_.model.ignore_params;
  wopts.step_counter = pos_.step;  // one forward per optimizer step: a resumed run continues the count
  wopts.may_skip_steps = recipe_.train.on_nonfinite == OnNonFinite::kSkipStep;
  AlgorithmBuildContext context;
  context.optimizers = built_.optimizers;
  ddp_ = with_bagua(module_, built_.optimizers, make_algorithm(recipe_.algorithm.name, recipe_.algorithm.kwargs, context),
                    wopts);
}

// What with_bagua's broadcast replaced with rank 0's: this rank's own
// weights, optimizer and algorithm state, and RNG, from its rank file.
// After a resize only the RNG of ranks that had a file: every rank starts
// from model.pt (the ranks' average, for per-rank algorithms) with rank 0's
// optimizer state and fresh algorithm state (docs/multi-node.md).
void Worker::restore_rank_state() {
  if (outcome_.resumed_from.empty()) return;
  train::load_rank_state(outcome_.resumed_from, params_, buffers_, built_.optimizers, rank_state(),
                         /*rng_only=*/resized_.has_value());
}

train::RankState Worker::rank_state() {
  train::RankState rank;
  rank.model = per_rank_model_;
  rank.save_algorithm = [this](torch::serialize::OutputArchive& a) { ddp_->save_algorithm_state(a); };
  rank.load_algorithm = [this](torch::serialize::InputArchive& a) { ddp_->load_algorithm_state(a); };
  return rank;
}

// Steps per epoch and in all; the log; the first lines the user reads.
void Worker::plan() {
  const int rank = env_.rank;
  const int64_t batch = recipe_.data.batch_size;
  // drop_last is the sampler's (the tail that does not divide across the
  // workers); every worker's last batch may be smaller, as in PyTorch's
  // DataLoader without its own drop_last. With variable-size batches
  // (sampler.batch_complexity) the count may differ from epoch to epoch.
  // (An epoch a resize continues mid-way is shorter: per_epoch_ is a whole one's.)
  per_epoch_ = sampler_->num_batches(pos_.epoch_start > 0 ? pos_.epoch + 1 : 0);
  if (per_epoch_ == 0) throw Error("the training set gives this worker no samples: no step would run", true);
  const bool variable = recipe_.data.sampler.batch_complexity.has_value();
  total_ = 0;
  if (resized_ && !schedule_ && !variable) {
    // A checkpoint from before "progress" was saved: its run's units.
    const auto before = make_sampler(recipe_.data, *train_data_, static_cast<int>(resized_->world),
                                     resized_->global_batch);
    schedule_ = ScheduleUnits{resized_->global_batch, before->num_batches(0), 0, true};
  }
  if (resized_ || (schedule_ && schedule_->by_samples)) {
    // The run changed size: the steps done, then what is left at this size.
    total_ = pos_.step;
    for (int64_t e = pos_.epoch; e < recipe_.train.epochs; ++e) {
      total_ += e == pos_.epoch ? sampler_->num_batches(e) - pos_.batch_in_epoch
                                : variable ? sampler_->num_batches(e) : per_epoch_;
      if (recipe_.train.max_steps && total_ >= *recipe_.train.max_steps) break;
    }
  } else {
    for (int64_t e = 0; e < recipe_.train.epochs; ++e) {
      total_ += variable ? sampler_->num_batches(e) : per_epoch_;
      if (recipe_.train.max_steps && total_ >= *recipe_.train.max_steps) break;
    }
  }
  if (recipe_.train.max_steps) total_ = std::min(total_, *recipe_.train.max_steps);
  if (!schedule_ && !variable) schedule_ = ScheduleUnits{sampler_->global_batch(), per_epoch_, 0, false};
  if (schedule_) {
    schedule_->total_steps = schedule_->steps_per_epoch * recipe_.train.epochs;
    if (recipe_.train.max_steps) schedule_->total_steps = std::min(schedule_->total_steps, *recipe_.train.max_steps);
  }
  if (const char* path = std::getenv("BAGUA_RECORD_SAMPLES"); path && *path) {
    sample_log_ = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (sample_log_ < 0) throw Error(std::string("BAGUA_RECORD_SAMPLES: cannot open ") + path, true);
    if (rank == 0 && !outcome_.resumed_from.empty()) {
      const std::string line = "resume " + std::to_string(pos_.step) + "\n";
      if (::write(sample_log_, line.data(), line.size()) < 0) std::fprintf(stderr, "BAGUA_RECORD_SAMPLES: write failed\n");
    }
  }

  if (rank == 0 && !outcome_.resumed_from.empty()) logged_before_ = last_logged_step(out_dir_ / "metrics.jsonl");
  log_ = std::make_unique<train::RunLog>((out_dir_ / "metrics.jsonl").string(), rank == 0, total_,
                                         !outcome_.resumed_from.empty(), pos_.step);
  if (recipe_.output.tensorboard) log_->add_tensorboard((out_dir_ / "tensorboard").string());
  train::NonFiniteGuard::Options guard;
  guard.mode = recipe_.train.on_nonfinite;
  guard.device = env_.device;
  guard.replicas_identical = algorithm_->traits.replicas_identical;
  guard.synchronous = algorithm_->traits.synchronous;
  guard.rank = rank;
  guard.world = env_.world;
  guard.control = env_.control;
  // qadam averages its momenta, not the gradients, after its warm-up: a NaN
  // on one rank reaches the others through them.
  if (auto qadam = built_.optimizers.size() == 1 ? std::dynamic_pointer_cast<QAdamOptimizer>(built_.optimizers[0])
                                                 : nullptr) {
    train::NamedTensors driven;  // the parameters the optimizer updates, by name
    for (const auto& [name, p] : params_) {
      for (const auto& group : qadam->param_groups()) {
        for (const auto& q : group.params()) {
          if (q.unsafeGetTensorImpl() == p.unsafeGetTensorImpl()) driven.emplace_back(name, p);
        }
      }
    }
    guard.averaged_state = [qadam, driven] {
      train::NamedTensors momenta;
      if (qadam->step_count() == 0) return momenta;
      for (const auto& [name, p] : driven) momenta.emplace_back(name, qadam->state_of(p).exp_avg());
      return momenta;
    };
  }
  // Async ranks skip alone: each says so in its own log.
  guard_ = std::make_unique<train::NonFiniteGuard>(guard, [this](const std::string& line) {
    if (algorithm_->traits.synchronous) {
      log_->say(line);
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
      std::fflush(stderr);
    }
  });
  if (recipe_.output.trace) {
    trace_ = std::make_unique<train::StepTrace>(
        rank, recipe_.output.trace_from_step, recipe_.output.trace_steps,
        (out_dir_ / "trace" / ("rank-" + std::to_string(rank) + ".json")).string());
    ddp_->set_trace([t = trace_.get()](const TraceEvent& e) { t->on_module_event(e); });
  }
  if (rank != 0) return;
  write_file_atomically((out_dir_ / "recipe.resolved.yaml").string(), resolved_recipe_yaml(recipe_));
  train::write_provenance(out_dir_.string(), provenance_);
  log_->say("bagua run " + recipe_.name + ": " + std::to_string(env_.world) + " workers on " +
            (env_.device.is_cpu() ? std::string("CPUs") : "GPUs (rank 0 on " + env_.device.str() + ")") + " over " +
            default_group()->backend() + ", " + recipe_.algorithm.name + ", train " + train_data_->describe());
  if (eval_data_) log_->say("eval " + eval_data_->describe());
  log_->say("sampler: " + sampler_->describe());
  if (recipe_.data.sampler.batch_complexity) {
    log_->say(std::to_string(per_epoch_) + " steps in the first epoch (batches of up to " + std::to_string(batch) +
              " samples within " + std::to_string(*recipe_.data.sampler.batch_complexity) + " complexity, " +
              std::to_string(sampler_->samples_per_rank(0)) + " samples per worker), " + std::to_string(total_) +
              " steps in all; output in " + out_dir_.string());
  } else {
    const int64_t global = sampler_->global_batch();
    std::string per_worker = global % env_.world == 0
                                 ? "batch " + std::to_string(global / env_.world) + " per worker"
                                 : "batch " + std::to_string(global / env_.world) + " or " +
                                       std::to_string(global / env_.world + 1) + " per worker";
    if (recipe_.train.global_batch_size) per_worker += " (train.global_batch_size " + std::to_string(global) + ")";
    log_->say(std::to_string(per_epoch_) + " steps per epoch of " + per_worker + ", " + std::to_string(total_) +
              " steps in all; output in " + out_dir_.string());
  }
  for (const auto& name : built_.unassigned) log_->say("note: parameter " + name + " is in no optimizer: it stays fixed");
  if (!outcome_.resumed_from.empty()) {
    log_->say("resumed from " + outcome_.resumed_from + " at step " + std::to_string(pos_.step));
    metrics::ResumeRecord record{pos_.step, outcome_.resumed_from};
    if (const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT")) record.restart = std::atoll(restart);
    if (logged_before_ > pos_.step) {
      record.redone_steps = logged_before_ - pos_.step;
      record.redone_samples = record.redone_steps * (resized_ ? resized_->global_batch : sampler_->global_batch());
      log_->say("the run before had logged step " + std::to_string(logged_before_) + ": " +
                std::to_string(record.redone_steps) + (record.redone_steps == 1 ? " step" : " steps") + " (" +
                std::to_string(record.redone_samples) + " samples) after the checkpoint " +
                (record.redone_steps == 1 ? "is" : "are") + " done again");
    }
    if (record.restart > 0 || resized_) {
      const char* local = std::getenv("LOCAL_WORLD_SIZE");
      if (local && std::atoll(local) > 0) record.nodes = (env_.world + std::atoll(local) - 1) / std::atoll(local);
    }
    if (resized_) {
      record.previous_world_size = resized_->world;
      record.world_size = env_.world;
      record.previous_global_batch = resized_->global_batch;
      record.global_batch = sampler_->global_batch();
      record.epoch = pos_.epoch + 1;
      record.epoch_position = pos_.epoch_start;
      log_->say("resized: " + std::to_string(resized_->world) + " workers -> " + std::to_string(env_.world) +
                ", global batch " + std::to_string(resized_->global_batch) + " -> " +
                std::to_string(sampler_->global_batch()) + "; epoch " + std::to_string(pos_.epoch + 1) +
                " continues after its first " + std::to_string(pos_.epoch_start) + " of " +
                std::to_string(train_data_->size()) + " samples" +
                (schedule_ && schedule_->by_samples ? "; the learning-rate schedule follows the samples seen" : ""));
      if (resized_->global_batch != sampler_->global_batch() && !recipe_.train.global_batch_size) {
        log_->say("note: the global batch changed with the world size (data.batch_size stays per worker); "
                  "set train.global_batch_size to keep it");
      }
      if (per_rank_model_) {
        log_->say("note: " + recipe_.algorithm.name + " keeps one model per worker: after a resize every worker "
                  "starts from the workers' average (the checkpoint's model.pt) with rank 0's optimizer state and "
                  "fresh algorithm state");
      }
    }
    log_->record(record);
  }
  if (recipe_.output.trace) {
    const int64_t from = recipe_.output.trace_from_step, to = from + recipe_.output.trace_steps - 1;
    log_->say("tracing steps " + std::to_string(from) + "-" + std::to_string(to) + " into " +
              (out_dir_ / "trace").string() + "/rank-N.json" +
              (from > total_ ? " (WARNING: the run has only " + std::to_string(total_) + " steps: nothing will be traced)"
                             : ""));
  }
}

// ---------------------------------------------------------------- the loop

void Worker::loop() {
  window_ = std::make_unique<train::MetricsWindow>(env_.device, ddp_->bytes_sent());
  for (int64_t epoch = pos_.epoch; pos_.step < total_ && epoch < recipe_.train.epochs; ++epoch) {
    const auto batches = sampler_->batches(epoch, env_.rank);
    const auto count = static_cast<int64_t>(batches.size());
    int64_t b = epoch == pos_.epoch ? pos_.batch_in_epoch : 0;
    const int64_t start = epoch == pos_.epoch ? pos_.epoch_start : 0;  // where its batches began
    for (; b < count && pos_.step < total_; ++b) {
      if (faults_) faults_->at_step_start(pos_.step);
      progress_->step(pos_.step);
      trace_->begin_step(pos_.step + 1);
      phase(train::Phase::kCoordination, "control: stop vote");
      if (stop_due()) return stop_at({pos_.step, epoch, b, start});
      if (allocations_) allocations_->step_begins(pos_.step);
      train_step(epoch, b, batches[b]);
      if (allocations_) allocations_->step_ends();
      after_step(epoch, b, b + 1 == count);
      trace_->end_step();
    }
    if (b < count) {  // max_steps reached inside the epoch
      pos_ = {pos_.step, epoch, b, epoch == pos_.epoch ? pos_.epoch_start : 0};
      break;
    }
    outcome_.epochs_completed = epoch + 1;
    const bool epoch_eval = recipe_.train.eval_every.kind == EvalSchedule::Kind::kEpoch;
    if (epoch_eval || (!recipe_.checkpoint.every_steps && pos_.step < total_)) before_collective();
    if (epoch_eval) evaluate(epoch);
    pos_ = {pos_.step, epoch + 1, 0, 0};
    if (!recipe_.checkpoint.every_steps && pos_.step < total_) save(pos_);
  }
}

void Worker::train_step(int64_t epoch, int64_t b, const std::vector<int64_t>& samples) {
  phase(train::Phase::kData, "data");
  Batch batch = train::to_device(train_data_->get_batch(samples), env_.device);
  for (size_t i = 0; i < built_.optimizers.size(); ++i) {
    const bool by_samples = schedule_ && schedule_->by_samples;
    train::set_lr(*built_.optimizers[i],
                  train::scheduled_lr(recipe_.scheduler, built_.base_lrs[i], schedule_step(epoch, b),
                                      by_samples ? schedule_->total_steps : total_));
  }
  ddp_->zero_grad();
  phase(train::Phase::kForward, "forward");
  if (faults_) faults_->in_forward(pos_.step);
  at::Tensor loss = train::training_loss(recipe_, module_, *ddp_, batch);
  if (faults_) loss = faults_->on_loss(pos_.step, loss);
  phase(train::Phase::kBackward, "backward");  // with the communication it overlaps and waits for
  // Ranks' batches of different sizes (a global batch the world size does
  // not divide): weighted so the averaged gradient is the step's mean.
  if (const double weight = sampler_->loss_weight(epoch, b, env_.rank); weight != 1.0) {
    (loss * weight).backward();
  } else {
    loss.backward();
  }
  phase(train::Phase::kOptimizer, "optimizer");
  // Throws under on_nonfinite: stop.
  const bool skip = guard_->check_step(pos_.step, epoch, loss, params_, ddp_->bagua_build_params(), [&](int rank) {
    return rank == env_.rank ? samples : sampler_->batches(epoch, rank).at(b);
  });
  if (skip) {
    ddp_->skip_step();
  } else {
    ddp_->step();
  }
  ++pos_.step;
  record_samples(epoch, samples);
  progress_->step(pos_.step);
  phase(train::Phase::kCoordination, "metrics");
  if (!skip) window_->add_loss(loss);
  window_->add_step(static_cast<int64_t>(samples.size()), batch);
}

// The step's log record, evaluation and checkpoint, when they are due.
void Worker::after_step(int64_t epoch, int64_t b, bool epoch_ends) {
  if (pos_.step % recipe_.train.log_every_steps == 0 || pos_.step == total_) {
    record_window(epoch);
  } else {
    log_->tick(pos_.step, epoch + 1);
  }
  report_autotune();
  const bool eval_due =
      recipe_.train.eval_every.kind == EvalSchedule::Kind::kSteps && pos_.step % recipe_.train.eval_every.steps == 0;
  const bool save_due =
      recipe_.checkpoint.every_steps && pos_.step % *recipe_.checkpoint.every_steps == 0 && pos_.step < total_;
  if (eval_due || save_due) before_collective();
  if (eval_due) evaluate(epoch);
  if (save_due) {
    save(epoch_ends ? train::Position{pos_.step, epoch + 1, 0, 0}
                    : train::Position{pos_.step, epoch, b + 1, epoch == pos_.epoch ? pos_.epoch_start : 0});
  }
}

// Whether every rank agreed to stop at this step boundary (a signal). The
// ranks of synchronous algorithms read the same vote at the same step; those
// of asynchronous ones agree on a step and stop there (stop_vote.h).
bool Worker::stop_due() {
  if (algorithm_->traits.synchronous) return stop_vote_->poll(train::stop_requested_here());
  const auto at = stop_vote_->poll_async(train::stop_requested_here(), pos_.step);
  return at && pos_.step >= *at;
}

// Asynchronous ranks meet here before an evaluation, a checkpoint or the
// end, so that none is inside one while a peer stops short of it.
void Worker::before_collective() {
  phase(train::Phase::kCoordination, "control: stop vote");
  stop_vote_->enter_collective(train::stop_requested_here(), pos_.step);
}

// Every rank agreed to stop (a signal): a checkpoint at this step boundary.
void Worker::stop_at(const train::Position& at) {
  pos_ = at;
  save(pos_);
  log_->say("stopped by a signal at step " + std::to_string(pos_.step) + "; checkpoint written, resume with "
            "the same command");
  outcome_.stopped = true;
  outcome_.stop_signal = train::stop_signal_here();
}

// ---------------------------------------------------------------- around the loop

// The window since the last record (summed over the ranks, but for async
// ranks, which do not wait for each other: rank 0 reports its own).
void Worker::record_window(int64_t epoch) {
  guard_->check_window(window_->loss_sum(), pos_.step);
  const auto w = window_->close(ddp_->bytes_sent(), algorithm_->traits.synchronous ? env_.control : nullptr);
  outcome_.last_loss = w.mean_loss;
  metrics::StepRecord r;
  r.step = pos_.step;
  r.epoch = epoch + 1;
  r.loss = w.mean_loss;
  r.lr = built_.optimizers[0]->param_groups()[0].options().get_lr();
  r.samples_per_s = w.samples_per_s;
  r.time = log_->elapsed();
  r.comm_bytes = w.comm_bytes;
  if (recipe_.train.on_nonfinite == OnNonFinite::kSkipStep) r.nonfinite_skips = guard_->skips();
  r.padding = w.padding;
  if (built_.optimizers.size() > 1) r.lrs = train::current_lrs(built_.optimizers);
  const bool seen_before = divergence_.ever();
  r.diverging = divergence_.add(r.step, r.loss);
  log_->step(r);
  if (r.diverging && !seen_before) {
    log_->say("WARNING: the training loss is diverging: " + divergence_.first() +
              " (a lower learning rate, a longer warm-up, or another algorithm may help)");
  }
}

// bucket_size: auto: once the module has chosen, says what it tried and
// chose (log and metrics.jsonl), and keeps the choice for checkpoints.
void Worker::report_autotune() {
  if (tuned_bucket_bytes_ > 0 || !ddp_->autotune_result()) return;
  const AutotuneResult& r = *ddp_->autotune_result();
  tuned_bucket_bytes_ = r.chosen_bucket_bytes;
  metrics::AutotuneRecord record;
  record.step = pos_.step;
  record.bucket_bytes = r.chosen_bucket_bytes;
  std::string tried;
  for (const auto& t : r.trials) {
    record.trials.push_back({t.bucket_bytes, t.buckets, t.step_seconds});
    char line[96];
    std::snprintf(line, sizeof(line), "%s%lld B (%lld bucket%s) %.2f ms", tried.empty() ? "" : ", ",
                  static_cast<long long>(t.bucket_bytes), static_cast<long long>(t.buckets), t.buckets == 1 ? "" : "s",
                  t.step_seconds * 1e3);
    tried += line;
  }
  log_->record(record);
  log_->say("bucket_size auto: chose " + std::to_string(r.chosen_bucket_bytes) + " bytes per bucket after step " +
            std::to_string(r.at_step) + "; tried (median step of the slowest worker): " + tried);
}

// model.pt of the checkpoint holds the one model (the average, for per-rank
// algorithms); each rank's file holds its own.
void Worker::save(const train::Position& at) {
  phase(train::Phase::kCheckpoint);
  guard_->check_window(window_ ? window_->loss_sum() : at::Tensor(), pos_.step);
  side_work_begin();
  train::SaveCheckpointOptions options;
  options.dir = ckpt_dir_.string();
  options.position = at;
  options.recipe = &recipe_;
  options.parameters = params_;
  options.buffers = buffers_;
  options.optimizers = built_.optimizers;
  options.group = env_.control;
  options.keep = recipe_.checkpoint.keep;
  options.rank = rank_state();
  if (per_rank_model_) {
    for (const auto& [name, p] : params_) options.rank.parameters.emplace_back(name, p.detach().clone());
    for (const auto& [name, b] : buffers_) options.rank.buffers.emplace_back(name, b.detach().clone());
  }
  options.data_plan = train::data_plan(recipe_, train_data_->size());
  options.tuned_bucket_bytes = tuned_bucket_bytes_;
  options.provenance = provenance_;
  options.progress = progress(at);
  average_->run([&] { train::save_checkpoint(options); });
  side_work_end();
}

// The metrics are those of the model that is saved: the ranks' average for
// per-rank algorithms.
void Worker::evaluate(int64_t epoch) {
  if (!eval_data_) return;
  phase(train::Phase::kEvaluation);
  guard_->check_window(window_->loss_sum(), pos_.step);
  side_work_begin();
  last_eval_step_ = pos_.step;
  train::EvalResult e;
  average_->run([&] { e = train::evaluate(recipe_, module_, *eval_data_, env_.control, env_.device); });
  outcome_.eval_loss = e.loss;
  outcome_.eval_accuracy = e.accuracy;
  log_->eval({pos_.step, epoch + 1, e.loss, e.accuracy, e.samples, log_->elapsed()});
  side_work_end();
}

void Worker::finish() {
  if (!outcome_.stopped) before_collective();
  phase(train::Phase::kFinishing);
  guard_->check_window(window_->loss_sum(), pos_.step);
  finishing_ = true;
  side_work_begin();  // async: the weights stop moving before they are checked and saved
  if (!outcome_.stopped) {
    // The run ended between scheduled evaluations (max_steps): evaluate the final model.
    if (recipe_.train.eval_every.kind != EvalSchedule::Kind::kNever && last_eval_step_ != pos_.step && pos_.step > 0) {
      evaluate(std::min(pos_.epoch, recipe_.train.epochs - 1));
    }
    report_final_agreement();
    save(pos_);  // the final state: a later `resume: auto` finds the run complete
    write_model();
  }
  stop_vote_->drain(env_.control);
  outcome_.steps = pos_.step;
  if (allocations_) {
    std::fprintf(stderr, "rank %d: %s\n", env_.rank, allocations_->summary().c_str());
    std::fflush(stderr);
  }
  barrier(env_.control);
}

// The ranks' weights compared once at the end: identical for algorithms
// that promise it, so silent divergence cannot pass; reported as the
// spread for those that keep per-rank weights. With each rank's peak memory.
void Worker::report_final_agreement() {
  const train::FinalAgreement a = train::final_agreement(ddp_->bagua_build_params(), env_.control);
  metrics::MemoryRecord memory{pos_.step, a.peak_rss_bytes};
  log_->record(memory);
  const auto most = std::max_element(a.peak_rss_bytes.begin(), a.peak_rss_bytes.end());
  char line[128];
  std::snprintf(line, sizeof(line), "peak memory (RSS) per worker: at most %.0f MiB (rank %d)",
                static_cast<double>(*most) / (1 << 20), static_cast<int>(most - a.peak_rss_bytes.begin()));
  log_->say(line);
  const std::string except = recipe_.model.ignore_params.empty() ? "" : " (ignored parameters excepted)";
  if (a.no_weights) {
    log_->say(std::string("model.ignore_params matches every parameter: each worker trained its own model; "
                          "model.pt and the evaluations are ") +
              (algorithm_->traits.replicas_identical ? "rank 0's" : "of their average"));
  } else if (a.agree) {
    log_->say("final weights identical on all " + std::to_string(env_.world) + " workers" + except);
  } else if (algorithm_->traits.replicas_identical) {
    log_->say("WARNING: final weights differ between workers");
  } else {
    log_->say("final weights differ between workers, as " + recipe_.algorithm.name +
              " keeps one model per worker; model.pt and the evaluations are of their average");
  }
}

// OUTPUT/model.pt on rank 0: the one model (the ranks' average for per-rank
// algorithms), on the host so it loads on machines without a GPU too.
void Worker::write_model() {
  average_->run([&] {
    if (env_.rank != 0) return;
    if (env_.device.is_cpu()) {
      train::save_module(module_, (out_dir_ / "model.pt").string());
    } else {
      torch::jit::Module host = module_.clone();
      host.to(torch::kCPU);
      train::save_module(host, (out_dir_ / "model.pt").string());
    }
    log_->say("done: " + std::to_string(pos_.step) + " steps; model in " + (out_dir_ / "model.pt").string());
    if (divergence_.ever()) {
      log_->say("WARNING: this run's training loss diverged (" + divergence_.first() +
                "); the model may be useless: check the metrics' \"diverging\" records");
    }
  });
}

}  // namespace

TrainOutcome run_worker(const Recipe& recipe) {
  check_supported(recipe);
  // First, before the model and the data allocate anything large.
  const std::string malloc_policy = train::apply_allocator_policy(recipe.train.tuned_allocator);
  train::request_stop_on_signals();
  const char* rank = std::getenv("RANK");
  if (malloc_policy != "tuned" && (rank == nullptr || std::string(rank) == "0")) {
    std::fprintf(stderr, "malloc: %s\n", malloc_policy.c_str());
  }
  return Worker(recipe).run();
}

}  // namespace bagua
