// run_worker() (bagua/trainer.h): one rank of `bagua run` as a Worker
// (train/worker.h). This file is the loop (Worker::loop() and
// Worker::train_step(), one screen) and what ends a run: evaluations,
// checkpoints, the final agreement and model.pt; what comes before the loop
// is worker_setup.cpp.
#include "train/worker.h"

#include <bagua/communication.h>
#include <bagua/errors.h>
#include <bagua/metrics.h>
#include <bagua/preflight.h>
#include <bagua/system.h>

#include "train/allocator_policy.h"
#include "train/evaluation.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace fs = std::filesystem;

namespace bagua::train {

// ---------------------------------------------------------------- the loop

void Worker::loop() {
  window_ = std::make_unique<train::MetricsWindow>(env_.device, ddp_->bytes_sent());
  for (int64_t epoch = pos_.epoch; pos_.step < total_ && epoch < recipe_.train.epochs; ++epoch) {
    // Shared with the loader threads; each batch made when asked for (a
    // streamed set's epoch can hold millions of samples).
    const auto batches = sampler_->batch_list(epoch, env_.rank);
    const int64_t count = batches->size();
    int64_t b = epoch == pos_.epoch ? pos_.batch_in_epoch : 0;
    const int64_t start = epoch == pos_.epoch ? pos_.epoch_start : 0;  // where its batches began
    loader_->start(epoch, batches, b);
    for (; b < count && pos_.step < total_; ++b) {
      if (faults_) faults_->at_step_start(pos_.step);
      progress_->step(pos_.step);
      trace_->begin_step(pos_.step + 1);
      phase(train::Phase::kCoordination, "control: stop vote");
      if (stop_due()) return stop_at({pos_.step, epoch, b, start});
      if (allocations_) allocations_->step_begins(pos_.step);
      train_step(epoch, b, batches->at(b));
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
  Batch batch = train::to_device(loader_->next(b), env_.device);
  set_learning_rates(epoch, b);
  ddp_->zero_grad();
  // train.grad_accum_steps: the step's batch in micro-batches of
  // data.batch_size; each one's loss weighted by its share of the step's
  // samples, so the summed gradient is the step's mean. The algorithm sees
  // the last micro-batch only (set_gradient_sync), with the sum.
  const int64_t n = batch.input.size(0);
  const int64_t micro = accum_ > 1 ? recipe_.data.batch_size : std::max<int64_t>(n, 1);
  // Ranks' batches of different sizes (a global batch the world size does
  // not divide): weighted so the averaged gradient is the step's mean.
  const double rank_weight = sampler_->loss_weight(epoch, b, env_.rank);
  at::Tensor loss;  // the step's loss: the micro-batches' weighted sum
  Batch last_part;
  for (int64_t from = 0; from < n; from += micro) {
    const int64_t size = std::min(micro, n - from);
    const bool last = from + micro >= n;
    Batch part = size == n ? batch : train::slice_batch(batch, from, size);
    phase(train::Phase::kForward, "forward");
    if (faults_) faults_->in_forward(pos_.step);
    ddp_->set_gradient_sync(last);
    // The algorithm's forward-pre hook once per optimizer step.
    at::Tensor part_loss = train::training_loss(recipe_, module_, from == 0 ? ddp_.get() : nullptr, part);
    if (faults_ && last) part_loss = faults_->on_loss(pos_.step, part_loss);
    phase(train::Phase::kBackward, "backward");  // with the communication it overlaps and waits for
    const double share = size == n ? 1.0 : static_cast<double>(size) / static_cast<double>(n);
    const double weight = share * rank_weight;
    // train.precision: fp16: backward on the scaled loss (loss_scaler.h).
    at::Tensor to_backward = scaler_ ? scaler_->scaled(part_loss) : part_loss;
    if (faults_ && last && faults_->backward_factor(pos_.step) != 1.0)
      to_backward = to_backward * faults_->backward_factor(pos_.step);
    if (weight != 1.0) {
      (to_backward * weight).backward();
    } else {
      to_backward.backward();
    }
    loss = loss.defined() ? loss + part_loss.detach() * share : (share == 1.0 ? part_loss : part_loss.detach() * share);
    if (last) {
      last_part = part;
    } else {
      window_->add_micro_batch(part);
    }
  }
  ddp_->set_gradient_sync(true);
  phase(train::Phase::kOptimizer, "optimizer");
  // fp16: an overflow skips the step and lowers the scale (not a
  // divergence); else the gradients are unscaled before the guard and clipping.
  bool overflow = false;
  if (scaler_) overflow = scaler_->after_backward(loss, params_) == train::LossScaler::Verdict::kSkip;
  // Throws under on_nonfinite: stop.
  bool skip = overflow || guard_->check_step(pos_.step, epoch, loss, params_, ddp_->bagua_build_params(), [&](int rank) {
    return rank == env_.rank ? samples : sampler_->batch_list(epoch, rank)->at(b);
  });
  // train.clip_grad_norm, and grad_norm for the metrics record (computed on
  // the steps that log it when nothing is clipped: it costs a host sync).
  const bool logs = (pos_.step + 1) % recipe_.train.log_every_steps == 0 || pos_.step + 1 == total_;
  if (!skip && (recipe_.train.clip_grad_norm || logs)) {
    grad_norm_ = train::clip_gradients(params_, recipe_.train.clip_grad_norm);
  }
  if (skip) {
    ddp_->skip_step();
  } else {
    try {
      ddp_->step();
    } catch (const DivergedError& e) {  // NaN weights met in the algorithm's own exchange
      guard_->algorithm_found_divergence(e, pos_.step + 1);
    }
  }
  ++pos_.step;
  if (overflow && (scaler_->overflows() <= 3 || scaler_->overflows() % 100 == 0)) {
    char line[160];
    std::snprintf(line, sizeof(line), "step %lld: fp16 gradients overflowed; step skipped, loss scale lowered to %g "
                  "(%lld such steps so far)", static_cast<long long>(pos_.step), scaler_->scale(),
                  static_cast<long long>(scaler_->overflows()));
    if (algorithm_->traits.synchronous) {
      log_->say(line);  // rank 0's log and console, as the guard's warnings
    } else {
      std::fprintf(stderr, "[rank %d] %s\n", env_.rank, line);  // async ranks decide alone
      std::fflush(stderr);
    }
  }
  if (sample_record_) sample_record_->record(pos_.step, epoch, samples);
  progress_->step(pos_.step);
  phase(train::Phase::kCoordination, "metrics");
  if (!skip || overflow) window_->add_loss(loss);  // an overflow's loss is a real one
  window_->add_step(static_cast<int64_t>(samples.size()), last_part);
}

// The learning-rate schedule at this step: by the step, or, once the run
// changed size, by the samples seen (resume.h).
int64_t Worker::schedule_steps() const {
  return schedule_ && schedule_->by_samples ? schedule_->total_steps : total_;
}

void Worker::set_learning_rates(int64_t epoch, int64_t b) {
  const bool by_samples = schedule_ && schedule_->by_samples;
  const double at = train::schedule_step(schedule_, pos_.step, epoch,
                                         by_samples ? sampler_->position(epoch, b) : std::nullopt);
  for (size_t i = 0; i < built_.optimizers.size(); ++i) {
    train::set_lr(*built_.optimizers[i],
                  train::scheduled_lr(recipe_.scheduler, built_.base_lrs[i], at, schedule_steps()));
  }
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
  if (save_due && pos_.step < total_) {  // an early stop ended the run: finish() saves
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
  guard_->check_window(pos_.step);
  // Unreadable images skipped: every rank's (rank 0's own under async).
  const bool skipping = recipe_.data.train.skip_unreadable;
  const auto w = window_->close(ddp_->bytes_sent(), algorithm_->traits.synchronous ? env_.control : nullptr,
                                skipping ? train_data_->skipped_samples() : 0);
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
  if (skipping) r.skipped_images = w.total;
  if (scaler_) {
    r.loss_scale = scaler_->scale();
    r.overflow_skips = scaler_->overflows();
  }
  r.grad_norm = grad_norm_;
  grad_norm_.reset();
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
  guard_->check_window(pos_.step);
  side_work_begin();
  train::SaveCheckpointOptions options;
  options.dir = ckpt_dir_.string();
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
  CheckpointMeta& meta = options.meta;
  meta.position = at;
  meta.data_plan = data_plan(recipe_, train_data_->size());
  meta.tuned_bucket_bytes = tuned_bucket_bytes_;
  meta.provenance = provenance_;
  // What a resume at another size needs: the global batch, where the
  // position lies in the epoch's sample order, the schedule's units.
  meta.global_batch = sampler_->global_batch();
  meta.epoch_position = sampler_->position(at.epoch, at.batch_in_epoch);
  meta.schedule = schedule_;
  meta.schedule_steps = schedule_steps();
  meta.finished = finishing_ && !outcome_.stopped;
  if (best_) meta.keep_best = best_->state();
  if (early_stop_) meta.early_stop = early_stop_->state();
  if (scaler_) {
    meta.loss_scale = scaler_->state().scale;
    meta.loss_scale_growth_tracker = scaler_->state().growth_tracker;
  }
  average_->run([&] { train::save_checkpoint(options); });
  side_work_end();
}

// The metrics are those of the model that is saved: the ranks' average for
// per-rank algorithms. Then what they decide: the best model kept
// (checkpoint.keep_best), the end of the run (train.early_stop: every rank
// judges the same reduced figures, so all end at this step).
void Worker::evaluate(int64_t epoch) {
  if (!eval_data_) return;
  phase(train::Phase::kEvaluation);
  guard_->check_window(pos_.step);
  side_work_begin();
  last_eval_step_ = pos_.step;
  metrics::EvalRecord r;
  average_->run([&] {
    const train::EvalResult e = train::evaluate(recipe_, module_, *eval_data_, env_.control, env_.device);
    r.step = pos_.step;
    r.epoch = epoch + 1;
    r.eval_loss = e.loss;
    r.eval_accuracy = e.accuracy;
    r.eval_samples = e.samples;
    r.time = log_->elapsed();
    r.eval_perplexity = e.perplexity;
    if (best_) best_->after_evaluation(module_, r);
  });
  outcome_.eval_loss = r.eval_loss;
  outcome_.eval_accuracy = r.eval_accuracy;
  // The final evaluation (finish()) still counts, for a run made longer later.
  const auto stop = early_stop_ ? early_stop_->after_evaluation(r) : std::nullopt;
  r.early_stop = stop && !finishing_;
  log_->eval(r);
  if (r.early_stop) {
    log_->say("early stop: " + *stop);
    outcome_.early_stop = *stop;
    total_ = pos_.step;  // the loop ends at this step boundary; finish() ends the run as max_steps does
  }
  side_work_end();
}

void Worker::finish() {
  if (!outcome_.stopped) before_collective();
  phase(train::Phase::kFinishing);
  guard_->check_window(pos_.step);
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
    train::save_host_module(module_, (out_dir_ / "model.pt").string());
    std::string best;  // checkpoint.keep_best's model
    if (best_ && !std::isnan(best_->state().value)) {
      const BestEvaluation& b = best_->state();
      best = std::string("; best ") + to_string(b.goal.metric) + " " + train::figure_text(b.goal.metric, b.value) +
             " at step " + std::to_string(b.step) + " in " + (out_dir_ / "best" / "model.pt").string();
    }
    log_->say(log_->summary(pos_.step) + (outcome_.early_stop.empty() ? "" : " (stopped early: train.early_stop)") +
              "; model in " + (out_dir_ / "model.pt").string() + best);
    if (divergence_.ever()) {
      log_->say("WARNING: this run's training loss diverged (" + divergence_.first() +
                "); the model may be useless: check the metrics' \"diverging\" records");
    }
  });
}

}  // namespace bagua::train

namespace bagua {

TrainOutcome run_worker(const Recipe& recipe) {
  check_supported(recipe);
  // First, before the model and the data allocate anything large.
  const std::string malloc_policy = train::apply_allocator_policy(recipe.train.tuned_allocator);
  train::request_stop_on_signals();
  const char* rank = std::getenv("RANK");
  if (malloc_policy != "tuned" && (rank == nullptr || std::string(rank) == "0")) {
    std::fprintf(stderr, "malloc: %s\n", malloc_policy.c_str());
  }
  return train::Worker(recipe).run();
}

}  // namespace bagua
