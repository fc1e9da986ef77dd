// Worker's parts before the loop (train/worker.h): joining the group,
// loading the model and data, resuming, wrapping with the algorithm, and
// planning the run's steps, log and first lines.
#include "train/worker.h"

#include <bagua/algorithms/algorithm.h>
#include <bagua/algorithms/registry.h>
#include <bagua/communication.h>
#include <bagua/errors.h>
#include <bagua/recipe.h>
#include <bagua/system.h>

#include "train/run_banner.h"
#include "train/run_provenance.h"
#include "train/worker_options.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>

namespace fs = std::filesystem;

namespace bagua::train {

void Worker::setup() {
  const at::Device device = train::choose_device(recipe_.train.device, train::local_rank_from_env());
  env_ = train::WorkerEnvironment::join(device, train::join_options(&recipe_));
  progress_ = std::make_unique<train::ProgressReporter>(env_.rank, env_.world);
  faults_ = train::TestFaults::from_environment(env_.rank);
  allocations_ = train::AllocationCounter::from_environment();
  out_dir_ = recipe_.output.dir;
  ckpt_dir_ = out_dir_ / "checkpoints";
  fs::create_directories(out_dir_);
  if (env_.rank == 0) train::recover_best_dir(out_dir_);
  if (recipe_.checkpoint.keep_best) {
    best_ = std::make_unique<train::BestModel>(*recipe_.checkpoint.keep_best, out_dir_, env_.rank == 0);
  }
  if (recipe_.train.early_stop) early_stop_ = std::make_unique<train::EarlyStop>(*recipe_.train.early_stop);

  torch::manual_seed(recipe_.train.seed);
  module_ = train::load_model(recipe_.model.torchscript, env_.device);
  train_data_ = train::load_training_set(recipe_, /*through_cache=*/true);
  eval_data_ = train::load_eval_set(recipe_, *train_data_);
  params_ = train::named_parameters(module_);
  buffers_ = train::named_buffers(module_);
  built_ = train::build_optimizers(recipe_.optimizers, params_);
  accum_ = recipe_.train.grad_accum_steps;
  sampler_ = sampler_for(accum_);
  {
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    loader_ = std::make_unique<data::BatchLoader>(
        train_data_, data::loader_threads_for(recipe_.data, *train_data_, local ? std::max(1, std::atoi(local)) : 1,
                                               at::get_num_threads()));
  }

  algorithm_ = find_algorithm(recipe_.algorithm.name);
  per_rank_model_ = !algorithm_->traits.replicas_identical || !recipe_.model.ignore_params.empty();
  // Stop votes on a group of their own.
  ProcessGroupPtr votes = default_group()->duplicate("gloo");
  votes->set_verify_collectives(false);
  stop_vote_ = std::make_unique<train::StopVote>(votes, algorithm_->traits.synchronous);
  average_ = std::make_unique<train::ReplicaAverage>(params_, buffers_, algorithm_->traits.replicas_identical,
                                                     default_group());
  if (recipe_.train.precision == Precision::kFp16) {
    train::LossScaler::Options o;
    using Ranks = train::LossScaler::Options::Ranks;
    o.ranks = !algorithm_->traits.synchronous         ? Ranks::kAlone
              : algorithm_->traits.replicas_identical ? Ranks::kIdentical
                                                      : Ranks::kAgree;
    o.control = env_.control;
    scaler_ = std::make_unique<train::LossScaler>(o);
  }
}

// The sampler of steps of `accum` micro-batches of data.batch_size.
std::unique_ptr<Sampler> Worker::sampler_for(int64_t accum) const {
  DataSpec per_step = recipe_.data;
  per_step.batch_size *= accum;
  return make_sampler(per_step, *train_data_, env_.world, recipe_.train.global_batch_size.value_or(0));
}

void Worker::resume() {
  provenance_ = train::gather_provenance(recipe_, env_.rank, env_.world, env_.control);
  if (recipe_.checkpoint.resume == "never") return set_earlier_checkpoints_aside();
  const std::string explicit_path = recipe_.checkpoint.resume == "auto" ? "" : recipe_.checkpoint.resume;
  // Before any state is loaded, on every rank alike: refuse a checkpoint
  // whose batches or provenance differ, and decide a resize (throwing when
  // the sampler cannot continue the epoch at the new size).
  auto verify = [this](const std::string& where, const CheckpointMeta& saved) {
    check_data_plan(saved.data_plan, data_plan(recipe_, train_data_->size()), where,
                    recipe_.checkpoint.allow_data_change, sampler_->can_reshard());
    train::check_provenance(saved.provenance, provenance_, recipe_, where, [this](const std::string& line) {
      if (env_.rank == 0) std::fprintf(stderr, "%s\n", line.c_str());
    });
    // With accumulation, a resume keeps the checkpoint's global batch by
    // another number of micro-batches where data.batch_size x workers
    // divides it.
    if (recipe_.train.grad_accum_steps > 1) {
      const int64_t saved_global = saved.global_batch.value_or(0), per = recipe_.data.batch_size * env_.world;
      const int64_t keep = saved_global > 0 && saved_global % per == 0 ? saved_global / per : recipe_.train.grad_accum_steps;
      if (keep != accum_) {
        accum_ = keep;
        sampler_ = sampler_for(accum_);
      }
      accum_before_ = accum_ != recipe_.train.grad_accum_steps ? recipe_.train.grad_accum_steps : 0;
    }
    resized_ = train::decide_resize(saved, env_.world, sampler_->global_batch(), recipe_.data.batch_size);
    if (resized_ && resized_->position > 0 && !sampler_->can_reshard()) {
      sampler_->start_epoch_at(saved.position.epoch, resized_->position);  // throws, saying why
    }
  };
  const auto resumed = train::resume_checkpoint(ckpt_dir_.string(), explicit_path, params_, buffers_,
                                                built_.optimizers, default_group(), verify);
  if (!resumed) return;
  outcome_.resumed_from = resumed->where;
  pos_ = train::resume_position(resumed->meta, resized_);
  // The epoch continues in the sample order from where its batches began.
  sampler_->start_epoch_at(pos_.epoch, pos_.epoch_start);
  schedule_ = train::resumed_schedule(resumed->meta, resized_.has_value());
  schedule_steps_before_ = resumed->meta.schedule_steps;
  tuned_bucket_bytes_ = resumed->meta.tuned_bucket_bytes;
  if (best_) best_->resume_from(resumed->meta.keep_best);
  if (early_stop_) early_stop_->resume_from(resumed->meta.early_stop);
  if (scaler_ && resumed->meta.loss_scale)
    scaler_->restore({*resumed->meta.loss_scale, resumed->meta.loss_scale_growth_tracker});
}

// A fresh run must not mix its checkpoints with an earlier run's: pruning
// and a later restart would pick the old ones up. The earlier best model
// (checkpoint.keep_best) goes with them: it is not this run's.
void Worker::set_earlier_checkpoints_aside() {
  std::string moved;
  const std::string when = std::to_string(std::time(nullptr));
  if (env_.rank == 0 && fs::exists(ckpt_dir_) && !fs::is_empty(ckpt_dir_)) {
    fs::path aside = out_dir_ / ("checkpoints-before-" + when);
    fs::rename(ckpt_dir_, aside);
    moved = aside.string();
  }
  broadcast_object(moved, 0, default_group());
  if (env_.rank == 0 && !moved.empty()) {
    std::fprintf(stderr, "checkpoint.resume is never: moved the earlier run's checkpoints to %s\n", moved.c_str());
  }
  if (env_.rank == 0 && fs::exists(out_dir_ / "best")) {
    const fs::path aside = out_dir_ / ("best-before-" + when);
    fs::rename(out_dir_ / "best", aside);
    std::fprintf(stderr, "checkpoint.resume is never: moved the earlier run's best model to %s\n", aside.c_str());
  }
}

void Worker::wrap() {
  // One forward per optimizer step: a resumed run continues the count.
  const WithBaguaOptions options = train::with_bagua_options(recipe_, tuned_bucket_bytes_, pos_.step);
  AlgorithmBuildContext context;
  context.optimizers = built_.optimizers;
  ddp_ = with_bagua(module_, built_.optimizers, make_algorithm(recipe_.algorithm.name, recipe_.algorithm.kwargs, context),
                    options);
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
  count_steps();
  sample_record_ = train::SampleRecord::from_environment(env_.rank, outcome_.resumed_from.empty() ? -1 : pos_.step);
  open_log();
  make_guard();
  if (recipe_.output.trace) {
    trace_ = std::make_unique<train::StepTrace>(
        env_.rank, recipe_.output.trace_from_step, recipe_.output.trace_steps,
        (out_dir_ / "trace" / ("rank-" + std::to_string(env_.rank) + ".json")).string());
    ddp_->set_trace([t = trace_.get()](const TraceEvent& e) { t->on_module_event(e); });
  }
  if (env_.rank == 0) announce();
}

// drop_last is the sampler's (the tail that does not divide across the
// workers); every worker's last batch may be smaller, as in PyTorch's
// DataLoader without its own drop_last. With variable-size batches
// (sampler.batch_complexity) the count may differ from epoch to epoch.
void Worker::count_steps() {
  const bool variable = recipe_.data.sampler.batch_complexity.has_value();
  train::StepBudgetInput in;
  in.epochs = recipe_.train.epochs;
  in.max_steps = recipe_.train.max_steps;
  in.variable_batches = variable;
  in.batches_in_epoch = [this](int64_t e) { return sampler_->num_batches(e); };
  in.from = pos_;
  in.changed_size = resized_.has_value() || (schedule_ && schedule_->by_samples);
  const train::StepBudget budget = train::step_budget(in);
  per_epoch_ = budget.per_epoch;
  total_ = budget.total;
  if (per_epoch_ == 0) throw Error("the training set gives this worker no samples: no step would run", true);
  if (resized_ && !schedule_ && !variable) {
    // A checkpoint from before "progress" was saved: its run's units.
    const auto before = make_sampler(data_per_step(recipe_.data, recipe_.train), *train_data_,
                                     static_cast<int>(resized_->world),
                                     resized_->global_batch);
    schedule_ = ScheduleUnits{resized_->global_batch, before->num_batches(0), true, 0};
  }
  schedule_ = train::schedule_units(schedule_, sampler_->global_batch(), per_epoch_, variable, recipe_.train.epochs,
                                    recipe_.train.max_steps);
}

void Worker::open_log() {
  const fs::path metrics = out_dir_ / "metrics.jsonl";
  const bool resumed = !outcome_.resumed_from.empty();
  log_ = std::make_unique<train::RunLog>(metrics.string(), env_.rank == 0, total_, resumed, pos_.step);
  if (recipe_.output.tensorboard) log_->add_tensorboard((out_dir_ / "tensorboard").string());
}

void Worker::make_guard() {
  train::NonFiniteGuard::Options guard;
  guard.mode = recipe_.train.on_nonfinite;
  guard.device = env_.device;
  guard.replicas_identical = algorithm_->traits.replicas_identical;
  guard.synchronous = algorithm_->traits.synchronous;
  guard.rank = env_.rank;
  guard.world = env_.world;
  guard.control = env_.control;
  // An algorithm that averages optimizer state in place of the gradients
  // (AveragedOptimizerState, e.g. momenta after a warm-up): a NaN on
  // one rank reaches the others through it, so the guard checks it too.
  for (const auto& optimizer : built_.optimizers) {
    auto averaged = std::dynamic_pointer_cast<AveragedOptimizerState>(optimizer);
    if (!averaged) continue;
    std::map<const void*, std::string> names;  // the parameters by identity
    for (const auto& [name, p] : params_) names[p.unsafeGetTensorImpl()] = name;
    guard.averaged_state = [averaged, names] {
      NamedTensors state;
      for (const auto& [p, t] : averaged->averaged_state()) state.emplace_back(names.at(p.unsafeGetTensorImpl()), t);
      return state;
    };
  }
  // Of several ranks that diverge, the launcher names the first (progress.h).
  guard.diverged = [this](int64_t unix_ms) {
    progress_->diverged(unix_ms);
    if (faults_) faults_->on_diverged();
  };
  // Async ranks skip alone: each says so in its own log.
  guard_ = std::make_unique<train::NonFiniteGuard>(guard, [this](const std::string& line) {
    if (algorithm_->traits.synchronous) {
      log_->say(line);
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
      std::fflush(stderr);
    }
  });
}

// Rank 0: the resolved recipe and provenance.json, then the first lines.
void Worker::announce() {
  write_file_atomically((out_dir_ / "recipe.resolved.yaml").string(), resolved_recipe_yaml(recipe_));
  train::write_provenance(out_dir_.string(), provenance_);
  train::RunBanner b;
  b.recipe = recipe_.name;
  b.algorithm = recipe_.algorithm.name;
  b.hierarchy = hierarchical_choice(recipe_.algorithm.name, recipe_.algorithm.kwargs, job_nodes({}));
  b.backend = default_group()->backend();
  b.world = env_.world;
  b.device = env_.device.is_cpu() ? std::string("CPUs") : "GPUs (rank 0 on " + env_.device.str() + ")";
  b.train_data = train_data_->describe();
  if (eval_data_) b.eval_data = eval_data_->describe();
  b.sampler = sampler_->describe();
  {
    std::vector<std::string> step;
    if (recipe_.train.precision == Precision::kBf16) step.push_back("bf16 autocast");
    if (recipe_.train.precision == Precision::kFp16) step.push_back("fp16 autocast with dynamic loss scaling");
    if (accum_ > 1)
      step.push_back(std::to_string(accum_) + " micro-batches of " +
                     std::to_string(recipe_.data.batch_size) + " per worker, gradients sent once");
    if (recipe_.train.clip_grad_norm) {
      char text[64];
      std::snprintf(text, sizeof(text), "gradient norm clipped at %g", *recipe_.train.clip_grad_norm);
      step.push_back(text);
    }
    for (const auto& s : step) b.step += (b.step.empty() ? "" : "; ") + s;
  }
  if (const int n = loader_->threads(); n > 0)
    b.loader = std::to_string(n) + " thread" + (n == 1 ? "" : "s") + " loading up to " + std::to_string(2 * n) +
               " batches ahead of the step (data.loader_threads)";
  b.out_dir = out_dir_.string();
  b.per_epoch = per_epoch_;
  b.total = total_;
  b.batch_complexity = recipe_.data.sampler.batch_complexity;
  b.batch_size = recipe_.data.batch_size;
  b.samples_per_worker = sampler_->samples_per_rank(0);
  b.global_batch = sampler_->global_batch();
  b.global_batch_given = recipe_.train.global_batch_size.has_value();
  b.unassigned = built_.unassigned;
  train::say_run_banner(*log_, b);
  if (!outcome_.resumed_from.empty()) {
    train::ResumeFacts f;
    f.from = outcome_.resumed_from;
    f.at = pos_;
    f.logged_before = log_->logged_before();
    f.world = env_.world;
    f.global_batch = sampler_->global_batch();
    f.global_batch_given = b.global_batch_given;
    f.resized = resized_;
    f.schedule_by_samples = schedule_ && schedule_->by_samples;
    f.train_samples = train_data_->size();
    f.algorithm = recipe_.algorithm.name;
    f.per_rank_model = per_rank_model_;
    f.accum = accum_;
    f.accum_before = accum_before_;
    f.batch_size = recipe_.data.batch_size;
    // A cosine or linear schedule over the whole run follows its length.
    const SchedulerSpec& sched = recipe_.scheduler;
    if ((sched.type == SchedulerType::kCosine || sched.type == SchedulerType::kLinear) && !sched.total_steps) {
      f.schedule = sched.type == SchedulerType::kCosine ? "cosine" : "linear";
      f.schedule_steps_before = schedule_steps_before_;
      f.schedule_steps = schedule_steps();
    }
    train::say_resumed(*log_, f);
    // Nothing left (a raised max_steps that train.epochs still caps, or the
    // reverse): say which limit ends the run, or it ends with "0 in this
    // run" and no reason.
    if (pos_.step >= total_) {
      const int64_t max_steps = recipe_.train.max_steps.value_or(0);
      const bool epochs_cap = max_steps == 0 || max_steps > total_;
      log_->say("nothing left to train: step " + std::to_string(pos_.step) + " is the end of this recipe's run (" +
                (epochs_cap ? "train.epochs " + std::to_string(recipe_.train.epochs) + " of " +
                                  std::to_string(per_epoch_) + " steps" +
                                  (max_steps > 0 ? "; train.max_steps " + std::to_string(max_steps) + " is beyond it" : "")
                            : "train.max_steps " + std::to_string(max_steps)) +
                "); raise " + (epochs_cap ? "train.epochs" : "train.max_steps") + " to train further");
    }
  }
  if (recipe_.output.trace) {
    const int64_t from = recipe_.output.trace_from_step, to = from + recipe_.output.trace_steps - 1;
    log_->say("tracing steps " + std::to_string(from) + "-" + std::to_string(to) + " into " +
              (out_dir_ / "trace").string() + "/rank-N.json" +
              (from > total_ ? " (WARNING: the run has only " + std::to_string(total_) + " steps: nothing will be traced)"
                             : ""));
  }
}

}  // namespace bagua::train
