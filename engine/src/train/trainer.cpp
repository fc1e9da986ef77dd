// run_worker(): the training loop of one rank.
#include <bagua/algorithms/registry.h>
#include <bagua/communication.h>
#include <bagua/data.h>
#include <bagua/distributed.h>
#include <bagua/errors.h>
#include <bagua/trainer.h>

#include "comm/c10d_compat.h"
#include "train/checkpoint.h"
#include "train/dataset_cache.h"
#include "train/progress_reporter.h"
#include "train/components.h"
#include "train/run_log.h"
#include "train/step_trace.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <ctime>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <csignal>
#include <sys/resource.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

namespace fs = std::filesystem;

namespace bagua {
namespace {

std::atomic<bool> g_stop_requested{false};
extern "C" void request_stop(int) { g_stop_requested = true; }

// Testing aids (docs/run.md): an environment variable VAR=RANK:STEP fires
// when that rank reaches that step (0-based steps done before it); with
// `first_attempt_only`, not after a max_restarts restart.
bool hook_fires(const char* var, int rank, int64_t step, bool first_attempt_only) {
  const char* spec = std::getenv(var);
  if (spec == nullptr) return false;
  const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
  if (first_attempt_only && restarts != nullptr && std::string(restarts) != "0") return false;
  int at_rank = -1;
  long long at_step = -1;
  return std::sscanf(spec, "%d:%lld", &at_rank, &at_step) == 2 && at_rank == rank && at_step == step;
}

// BAGUA_FAULT_AT_STEP: that rank kills itself with SIGKILL.
void maybe_inject_fault(int rank, int64_t step) {
  if (!hook_fires("BAGUA_FAULT_AT_STEP", rank, step, true)) return;
  std::fprintf(stderr, "BAGUA_FAULT_AT_STEP: rank %d kills itself at step %lld\n", rank, static_cast<long long>(step));
  std::fflush(stderr);
  std::raise(SIGKILL);
}

// BAGUA_STOP_AT_STEP: that rank stops itself (SIGSTOP) in the forward pass,
// a frozen worker for the stall watch.
void maybe_inject_stop(int rank, int64_t step) {
  if (!hook_fires("BAGUA_STOP_AT_STEP", rank, step, true)) return;
  std::fprintf(stderr, "BAGUA_STOP_AT_STEP: rank %d stops itself (SIGSTOP) at step %lld\n", rank,
               static_cast<long long>(step));
  std::fflush(stderr);
  std::raise(SIGSTOP);
}

// BAGUA_NAN_AT_STEP: that rank's loss is NaN, so its gradients are too.
at::Tensor maybe_inject_nan(int rank, int64_t step, const at::Tensor& loss) {
  if (!hook_fires("BAGUA_NAN_AT_STEP", rank, step, false)) return loss;
  return loss * std::numeric_limits<float>::quiet_NaN();
}

// The eval set as the model will see it: JSONL inputs are typed per file
// (integer-only lists are token ids, int64), so an eval file whose numbers
// happen to be whole would reach a model trained on float32 vectors as
// int64 and fail at the first evaluation, an epoch in. Such inputs are cast
// to the training set's dtype; the opposite (float inputs to a model of
// token ids) is an error before training starts.
class InputsCastTo : public Dataset {
 public:
  InputsCastTo(std::shared_ptr<Dataset> inner, at::ScalarType type) : inner_(std::move(inner)), type_(type) {}
  int64_t size() const override { return inner_->size(); }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    Batch b = inner_->get_batch(indices);
    b.input = b.input.to(type_);
    return b;
  }
  std::string describe() const override {
    return inner_->describe() + " (inputs cast to " + std::string(c10::toString(type_)) + ", as data.train's)";
  }
  int64_t num_classes() const override { return inner_->num_classes(); }

 private:
  std::shared_ptr<Dataset> inner_;
  at::ScalarType type_;
};

std::shared_ptr<Dataset> match_inputs(std::shared_ptr<Dataset> eval, const Dataset& train) {
  if (eval->size() == 0 || train.size() == 0) return eval;
  const at::ScalarType want = train.get_batch({0}).input.scalar_type();
  const at::ScalarType have = eval->get_batch({0}).input.scalar_type();
  if (want == have) return eval;
  if (at::isFloatingType(want) && at::isIntegralType(have, false)) {
    return std::make_shared<InputsCastTo>(std::move(eval), want);
  }
  throw Error("data.eval's inputs are " + std::string(c10::toString(have)) + " but data.train's are " +
                  c10::toString(want) + " (" + eval->describe() + "; train: " + train.describe() +
                  "): a model cannot take both; give both files the same kind of input",
              true);
}

at::Tensor forward_output(torch::jit::Module& module, BaguaModule* ddp, std::vector<c10::IValue> inputs) {
  c10::IValue out = ddp ? ddp->forward(module, std::move(inputs)) : module.forward(std::move(inputs));
  if (!out.isTensor()) {
    throw Error("the model's forward must return one tensor (logits, predictions or, with loss: model, the loss); "
                "it returned " + out.tagKind(), true);
  }
  return out.toTensor();
}

// A batch on the training device (the host-to-device copies are queued on
// the current stream; nothing waits for them here).
Batch to_device(Batch b, const at::Device& device) {
  if (device.is_cpu()) return b;
  b.input = b.input.to(device, /*non_blocking=*/true);
  if (b.target.defined()) b.target = b.target.to(device, /*non_blocking=*/true);
  return b;
}

Error no_gpu_error() {
#ifdef BAGUA_WITH_CUDA
  return Error("train.device is cuda, but no GPU is visible here (check nvidia-smi and CUDA_VISIBLE_DEVICES), or "
               "set train.device to auto or cpu",
               true);
#else
  return Error("train.device is cuda, but this bagua was built without CUDA (LibTorch CPU); build it against a "
               "CUDA LibTorch (scripts/build.sh --cuda, docs/building.md), or set train.device to auto or cpu",
               true);
#endif
}

// train.device resolved for this worker: GPU LOCAL_RANK modulo the visible
// GPUs, or the CPU. Makes that GPU the current device.
at::Device pick_device(Device wanted, int local_rank) {
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (wanted == Device::kCpu || (wanted == Device::kAuto && gpus == 0)) return at::Device(at::kCPU);
  if (gpus == 0) throw no_gpu_error();
  const int index = local_rank % gpus;
  comm::set_cuda_device(index);
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
}

struct EvalResult {
  double loss = 0;
  std::optional<double> accuracy;
  int64_t samples = 0;
};

// Every rank evaluates the samples r, r + world, ... (no padding, so no
// sample counts twice), then the sums are reduced.
EvalResult evaluate_model(const Recipe& recipe, torch::jit::Module& module, const Dataset& dataset,
                    const ProcessGroupPtr& group, const at::Device& device) {
  torch::NoGradGuard no_grad;
  module.eval();
  const int rank = group->rank(), world = group->size();
  std::vector<int64_t> mine;
  for (int64_t i = rank; i < dataset.size(); i += world) mine.push_back(i);
  double loss_sum = 0, correct = 0;
  const bool classify = train::is_classification(recipe.model.loss);
  for (const auto& idx : make_batches(mine, recipe.data.batch_size)) {
    Batch b = to_device(dataset.get_batch(idx), device);
    const double n = static_cast<double>(idx.size());
    if (recipe.model.loss == Loss::kModel) {
      loss_sum += forward_output(module, nullptr, {b.input, b.target}).item<double>() * n;
      continue;
    }
    at::Tensor out = forward_output(module, nullptr, {b.input});
    loss_sum += train::compute_loss(recipe.model.loss, out, b.target).item<double>() * n;
    if (classify) correct += out.argmax(1).eq(b.target).sum().item<double>();
  }
  at::Tensor sums = torch::tensor({loss_sum, correct, static_cast<double>(mine.size())}, torch::kDouble);
  allreduce(sums, ReduceOp::SUM, group);
  module.train();
  EvalResult r;
  r.samples = static_cast<int64_t>(sums[2].item<double>());
  if (r.samples > 0) {
    r.loss = sums[0].item<double>() / r.samples;
    if (classify) r.accuracy = sums[1].item<double>() / r.samples;
  }
  return r;
}

int default_threads() {
  unsigned cores = std::thread::hardware_concurrency();
  int local = 1;
  if (const char* v = std::getenv("LOCAL_WORLD_SIZE")) local = std::max(1, std::atoi(v));
  return std::max(1, static_cast<int>(cores == 0 ? 1 : cores) / local);
}

}  // namespace

void check_supported(const Recipe& recipe) {
  auto unsupported = [](const std::string& key, const std::string& what) {
    throw Error(key + ": " + what + " is not implemented in this version of bagua yet", true);
  };
  const AlgorithmDescriptor* algorithm = find_algorithm(recipe.algorithm.name);
  if (algorithm == nullptr || !algorithm->implemented()) {
    unsupported("algorithm.name", "algorithm '" + recipe.algorithm.name + "'");
  }
  if (recipe.train.device == Device::kCuda && torch::cuda::device_count() == 0) throw no_gpu_error();
}

void check_data(const Recipe& recipe, SharedData* share) {
  check_dataset(recipe.data.train, target_kind_for(recipe.model.loss), load_options_for(recipe.data), share);
  if (recipe.data.eval) check_dataset(*recipe.data.eval, target_kind_for(recipe.model.loss), {}, share);
}

namespace {

// One worker's run, in the order run_worker() calls its parts: setup()
// (group, device, model, data, optimizers), resume() (checkpoint or a clean
// directory), wrap() (the algorithm), loop() (the epochs; evaluate() and
// checkpoints between steps), finish() (final evaluation, weight check,
// final checkpoint, model.pt). Work that runs beside training (an
// algorithm's background communication) is paused around evaluation and
// checkpoints by side_work_begin()/side_work_end().
class Worker {
 public:
  explicit Worker(const Recipe& recipe) : recipe_(recipe) {}

  TrainOutcome run() {
    setup();
    resume();
    wrap();
    restore_rank_state();
    plan();
    loop();
    finish();
    return outcome_;
  }

 private:
  void setup();
  void resume();
  void wrap();
  void plan();
  void loop();
  void finish();
  void restore_rank_state();
  void evaluate(int64_t epoch);
  void save(const train::Position& at);
  bool stop_requested_by_any_rank();
  void drain_stop_votes();
  void cast_vote(bool stop);
  void record_step(int64_t epoch, int64_t samples, const Batch& batch);
  void report_peak_memory(const at::Tensor& per_rank_bytes);
  void check_gpu_nonfinite();
  bool nonfinite_step(const at::Tensor& loss, int64_t epoch, int64_t batch_index, const std::vector<int64_t>& samples);
  train::RankState rank_state();
  // Runs `fn` with every rank's weights replaced by the ranks' average (for
  // algorithms that keep one model per rank), then puts each rank's own
  // back. For one-model algorithms, floating-point buffers (running
  // statistics) become the ranks' average and stay so. Collective.
  void with_average_model(const std::function<void()>& fn);
  void average_floating_buffers();
  void average_in_place(const std::vector<at::Tensor>& tensors);
  // Background work of the algorithm (async averaging) stops around
  // evaluation and checkpoints. Collective.
  void side_work_begin() { ddp_->pause_background(); }
  void side_work_end() {
    if (!finishing_) ddp_->resume_background();
  }

  const Recipe& recipe_;
  const AlgorithmDescriptor* algorithm_ = nullptr;
  // Ranks hold different weights (per-rank algorithms, or rank-local
  // ignored parameters): checkpoints then keep each rank's own.
  bool per_rank_model_ = false;
  at::Device device_{at::kCPU};
  int rank_ = 0, world_ = 1;
  fs::path out_dir_, ckpt_dir_;
  torch::jit::Module module_;
  std::shared_ptr<Dataset> train_data_, eval_data_;
  std::vector<std::pair<std::string, at::Tensor>> params_, buffers_;
  train::BuiltOptimizers built_;
  ProcessGroupPtr control_;
  // Declared before the module, so it outlives the module's callbacks into it.
  std::unique_ptr<train::StepTrace> trace_ = std::make_unique<train::StepTrace>();
  std::shared_ptr<BaguaModule> ddp_;
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<train::RunLog> log_;
  train::Position pos_;
  TrainOutcome outcome_;
  int64_t per_epoch_ = 0, total_ = 0, last_eval_step_ = -1;
  int64_t nonfinite_skips_ = 0;  // steps skipped under train.on_nonfinite: skip_step
  int64_t gpu_clean_step_ = 0;   // on a GPU: the last step known finite (check_gpu_nonfinite)
  bool finishing_ = false;  // training is over: background work stays stopped
  int64_t tuned_bucket_bytes_ = 0;  // bucket_size: auto's choice (once made, or from the checkpoint)
  void report_autotune();

  // Stop votes, on a group of their own: synchronous algorithms read the
  // answer to the vote of one step ago; async ones only when it is in.
  ProcessGroupPtr votes_;
  at::Tensor stop_flag_;
  Work stop_work_;
  bool stop_pending_ = false;
  int64_t votes_cast_ = 0;
  // The current metrics window.
  at::Tensor window_loss_sum_;
  double window_samples_ = 0, window_steps_ = 0;
  double window_padding_ = 0, window_elements_ = 0;  // input elements that were padding, and all
  bool padded_input_ = false;                        // token sequences, whose padding metrics.jsonl reports
  int64_t window_bytes_start_ = 0;
  std::chrono::steady_clock::time_point window_start_;
  // Step and phase, for bagua run's stall watch, and the trace's spans
  // (named after the phase unless `label` says more).
  std::unique_ptr<train::ProgressReporter> progress_;
  void phase(train::Phase p, const char* label = nullptr) {
    if (progress_) progress_->phase(p);
    trace_->phase(label ? label : train::phase_name(p));
  }
};

void Worker::setup() {
  // The device first: a worker on the CPU never asks for NCCL.
  const char* local_rank_env = std::getenv("LOCAL_RANK");
  device_ = pick_device(recipe_.train.device, local_rank_env ? std::atoi(local_rank_env) : 0);
  InitOptions init;
  init.timeout = std::chrono::seconds(recipe_.distributed.timeout_s);
  init.backend = device_.is_cpu() && recipe_.distributed.backend == Backend::kAuto
                     ? "gloo"
                     : to_string(recipe_.distributed.backend);
  if (!is_initialized()) init_process_group(init);
  rank_ = get_rank();
  world_ = get_world_size();
  progress_ = std::make_unique<train::ProgressReporter>(rank_, world_);
  at::set_num_threads(recipe_.train.threads.value_or(default_threads()));
  out_dir_ = recipe_.output.dir;
  ckpt_dir_ = out_dir_ / "checkpoints";
  fs::create_directories(out_dir_);

  torch::manual_seed(recipe_.train.seed);
  module_ = torch::jit::load(recipe_.model.torchscript);
  module_.to(device_);
  module_.train();
  train_data_ = load_dataset(recipe_.data.train, target_kind_for(recipe_.model.loss), load_options_for(recipe_.data));
  train_data_ = train::cache_training_set(recipe_, std::move(train_data_));  // data.cache: train only
  if (recipe_.data.eval) {
    eval_data_ = match_inputs(load_dataset(*recipe_.data.eval, target_kind_for(recipe_.model.loss)), *train_data_);
  }

  for (const auto& p : module_.named_parameters(true)) params_.emplace_back(p.name, p.value);
  for (const auto& b : module_.named_buffers(true)) buffers_.emplace_back(b.name, b.value);
  built_ = train::build_optimizers(recipe_.optimizers, params_);

  // The loop's own small collectives (stop flags, metrics, checksums) on
  // CPU tensors over Gloo, so they never wait on the GPU's stream.
  control_ = default_group()->duplicate("gloo");
  control_->set_verify_collectives(false);
  votes_ = default_group()->duplicate("gloo");
  votes_->set_verify_collectives(false);
  algorithm_ = find_algorithm(recipe_.algorithm.name);
  per_rank_model_ = !algorithm_->traits.replicas_identical || !recipe_.model.ignore_params.empty();
}

void Worker::resume() {
  if (recipe_.checkpoint.resume == "never") {
    // A fresh run must not mix its checkpoints with an earlier run's: pruning
    // and a later restart would pick the old ones up.
    std::string moved;
    if (rank_ == 0 && fs::exists(ckpt_dir_) && !fs::is_empty(ckpt_dir_)) {
      fs::path aside = out_dir_ / ("checkpoints-before-" + std::to_string(std::time(nullptr)));
      fs::rename(ckpt_dir_, aside);
      moved = aside.string();
    }
    broadcast_object(moved, 0, default_group());
    if (rank_ == 0 && !moved.empty()) {
      std::fprintf(stderr, "checkpoint.resume is never: moved the earlier run's checkpoints to %s\n", moved.c_str());
    }
    return;
  }
  std::string explicit_path = recipe_.checkpoint.resume == "auto" ? "" : recipe_.checkpoint.resume;
  nlohmann::json meta;
  if (auto resumed = train::resume_checkpoint(ckpt_dir_.string(), explicit_path, params_, buffers_,
                                              built_.optimizers, default_group(), &outcome_.resumed_from, &meta)) {
    train::check_data_plan(meta.value("data", nlohmann::json()), train::data_plan(recipe_, train_data_->size()),
                           outcome_.resumed_from, recipe_.checkpoint.allow_data_change);
    pos_ = *resumed;
    if (meta.contains("tuned_bucket_bytes") && meta["tuned_bucket_bytes"].is_number_integer()) {
      tuned_bucket_bytes_ = meta["tuned_bucket_bytes"].get<int64_t>();
    }
  }
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
  AlgorithmBuildContext context;
  context.optimizers = built_.optimizers;
  ddp_ = with_bagua(module_, built_.optimizers, make_algorithm(recipe_.algorithm.name, recipe_.algorithm.kwargs, context),
                    wopts);
}

// What with_bagua's broadcast replaced with rank 0's: this rank's own
// weights, optimizer and algorithm state, and RNG, from its rank file.
void Worker::restore_rank_state() {
  if (outcome_.resumed_from.empty()) return;
  train::load_rank_state(outcome_.resumed_from, params_, buffers_, built_.optimizers, rank_state());
}

train::RankState Worker::rank_state() {
  train::RankState rank;
  rank.model = per_rank_model_;
  rank.save_algorithm = [this](torch::serialize::OutputArchive& a) { ddp_->save_algorithm_state(a); };
  rank.load_algorithm = [this](torch::serialize::InputArchive& a) { ddp_->load_algorithm_state(a); };
  return rank;
}

void Worker::with_average_model(const std::function<void()>& fn) {
  torch::NoGradGuard no_grad;
  if (algorithm_->traits.replicas_identical) {
    // One model, but each rank's running statistics (BatchNorm's mean and
    // variance) saw only its own batches: they become the ranks' average, for
    // good, so evaluations and model.pt use the same statistics everywhere.
    // (Training forwards use batch statistics, so this changes no step.)
    average_floating_buffers();
    fn();
    return;
  }
  // Floating parameters and buffers, one flat average per dtype.
  std::vector<at::Tensor> tensors;
  for (const auto& [name, p] : params_) tensors.push_back(p);
  for (const auto& [name, b] : buffers_) {
    if (at::isFloatingType(b.scalar_type())) tensors.push_back(b);
  }
  std::vector<at::Tensor> own;
  for (const auto& t : tensors) own.push_back(t.detach().clone());
  average_in_place(tensors);
  std::exception_ptr error;
  try {
    fn();
  } catch (...) {
    error = std::current_exception();
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].detach().copy_(own[i]);
  if (error) std::rethrow_exception(error);
}

void Worker::average_floating_buffers() {
  if (world_ == 1) return;
  std::vector<at::Tensor> floating;
  for (const auto& [name, b] : buffers_) {
    if (at::isFloatingType(b.scalar_type())) floating.push_back(b);
  }
  average_in_place(floating);
}

// Each tensor becomes the ranks' average: one flat allreduce per dtype.
void Worker::average_in_place(const std::vector<at::Tensor>& tensors) {
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& t : tensors) by_dtype[t.scalar_type()].push_back(t);
  for (auto& [dtype, group] : by_dtype) {
    std::vector<at::Tensor> parts;
    for (const auto& t : group) parts.push_back(t.detach().reshape({-1}));
    at::Tensor flat = torch::cat(parts);
    allreduce(flat, ReduceOp::AVG, default_group());
    int64_t offset = 0;
    for (auto& t : group) {
      t.detach().copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

// Steps per epoch and in all; the log; the first lines the user reads.
void Worker::plan() {
  sampler_ = make_sampler(recipe_.data, *train_data_, world_);
  const int64_t batch = recipe_.data.batch_size;
  // drop_last is the sampler's (the tail that does not divide across the
  // workers); every worker's last batch may be smaller, as in PyTorch's
  // DataLoader without its own drop_last. With variable-size batches
  // (sampler.batch_complexity) the count may differ from epoch to epoch.
  per_epoch_ = sampler_->num_batches(0);
  if (per_epoch_ == 0) throw Error("the training set gives this worker no samples: no step would run", true);
  const bool variable = recipe_.data.sampler.batch_complexity.has_value();
  total_ = 0;
  for (int64_t e = 0; e < recipe_.train.epochs; ++e) {
    total_ += variable ? sampler_->num_batches(e) : per_epoch_;
    if (recipe_.train.max_steps && total_ >= *recipe_.train.max_steps) break;
  }
  if (recipe_.train.max_steps) total_ = std::min(total_, *recipe_.train.max_steps);

  log_ = std::make_unique<train::RunLog>((out_dir_ / "metrics.jsonl").string(), rank_ == 0, total_,
                                         !outcome_.resumed_from.empty(), pos_.step);
  if (recipe_.output.tensorboard) log_->add_tensorboard((out_dir_ / "tensorboard").string());
  if (recipe_.output.trace) {
    trace_ = std::make_unique<train::StepTrace>(
        rank_, recipe_.output.trace_from_step, recipe_.output.trace_steps,
        (out_dir_ / "trace" / ("rank-" + std::to_string(rank_) + ".json")).string());
    ddp_->set_trace([t = trace_.get()](const TraceEvent& e) { t->on_module_event(e); });
  }
  if (rank_ != 0) return;
  std::ofstream(out_dir_ / "recipe.resolved.yaml") << resolved_recipe_yaml(recipe_);
  log_->say("bagua run " + recipe_.name + ": " + std::to_string(world_) + " workers on " +
            (device_.is_cpu() ? std::string("CPUs") : "GPUs (rank 0 on " + device_.str() + ")") + " over " +
            default_group()->backend() + ", " + recipe_.algorithm.name + ", train " + train_data_->describe());
  if (eval_data_) log_->say("eval " + eval_data_->describe());
  log_->say("sampler: " + sampler_->describe());
  if (recipe_.data.sampler.batch_complexity) {
    log_->say(std::to_string(per_epoch_) + " steps in the first epoch (batches of up to " + std::to_string(batch) +
              " samples within " + std::to_string(*recipe_.data.sampler.batch_complexity) + " complexity, " +
              std::to_string(sampler_->samples_per_rank(0)) + " samples per worker), " + std::to_string(total_) +
              " steps in all; output in " + out_dir_.string());
  } else {
    log_->say(std::to_string(per_epoch_) + " steps per epoch of batch " + std::to_string(batch) + " per worker, " +
              std::to_string(total_) + " steps in all; output in " + out_dir_.string());
  }
  for (const auto& name : built_.unassigned) log_->say("note: parameter " + name + " is in no optimizer: it stays fixed");
  if (!outcome_.resumed_from.empty()) {
    log_->say("resumed from " + outcome_.resumed_from + " at step " + std::to_string(pos_.step));
    log_->record(nlohmann::json({{"step", pos_.step}, {"resumed_from", outcome_.resumed_from}}).dump());
  }
  if (recipe_.output.trace) {
    const int64_t from = recipe_.output.trace_from_step, to = from + recipe_.output.trace_steps - 1;
    log_->say("tracing steps " + std::to_string(from) + "-" + std::to_string(to) + " into " +
              (out_dir_ / "trace").string() + "/rank-N.json" +
              (from > total_ ? " (WARNING: the run has only " + std::to_string(total_) + " steps: nothing will be traced)"
                             : ""));
  }
}

// model.pt of the checkpoint holds the one model (the average, for per-rank
// algorithms); each rank's file holds its own.
void Worker::save(const train::Position& at) {
  phase(train::Phase::kCheckpoint);
  check_gpu_nonfinite();
  side_work_begin();
  train::RankState rank = rank_state();
  if (per_rank_model_) {
    for (const auto& [name, p] : params_) rank.parameters.emplace_back(name, p.detach().clone());
    for (const auto& [name, b] : buffers_) rank.buffers.emplace_back(name, b.detach().clone());
  }
  with_average_model([&] {
    train::save_checkpoint(ckpt_dir_.string(), at, recipe_, params_, buffers_, built_.optimizers, control_,
                           recipe_.checkpoint.keep, rank, train::data_plan(recipe_, train_data_->size()),
                           tuned_bucket_bytes_);
  });
  side_work_end();
}

// The metrics are those of the model that is saved: the ranks' average for
// per-rank algorithms.
void Worker::evaluate(int64_t epoch) {
  if (!eval_data_) return;
  phase(train::Phase::kEvaluation);
  check_gpu_nonfinite();
  side_work_begin();
  last_eval_step_ = pos_.step;
  EvalResult e;
  with_average_model([&] { e = evaluate_model(recipe_, module_, *eval_data_, control_, device_); });
  outcome_.eval_loss = e.loss;
  outcome_.eval_accuracy = e.accuracy;
  log_->eval({pos_.step, epoch + 1, e.loss, e.accuracy, e.samples, log_->elapsed()});
  side_work_end();
}

// Did any rank ask to stop? The answer to the question asked one step ago
// arrives now, so the allreduce never waits on the critical path; every
// rank reads the same answer at the same step.
//
// Async algorithms must not wait for the slowest rank every step: there a
// vote is read only once every rank has cast it (polled, never waited for),
// and a new one is cast only then, so the ranks' votes stay matched one for
// one while they run at their own pace (drain_stop_votes() closes the last).
bool Worker::stop_requested_by_any_rank() {
  bool stop_now = false;
  if (stop_pending_) {
    if (!algorithm_->traits.synchronous && !stop_work_.is_completed()) return false;
    stop_work_.wait();
    stop_pending_ = false;
    stop_now = stop_flag_.item<double>() > 0;
  }
  cast_vote(g_stop_requested);
  return stop_now;
}

void Worker::cast_vote(bool stop) {
  stop_flag_ = torch::tensor({stop ? 1.0 : 0.0}, torch::kDouble);
  stop_work_ = allreduce_async(stop_flag_, ReduceOp::MAX, votes_);
  stop_pending_ = true;
  ++votes_cast_;
}

// At the end the ranks may have cast different numbers of votes (an async
// rank casts its next only when its last is complete, so a rank can be one
// ahead); they agree on the largest count and the others catch up, so every
// vote completes.
void Worker::drain_stop_votes() {
  at::Tensor most = torch::tensor({static_cast<double>(votes_cast_)}, torch::kDouble);
  allreduce(most, ReduceOp::MAX, control_);
  while (votes_cast_ < static_cast<int64_t>(most.item<double>())) cast_vote(false);
  if (stop_pending_) stop_work_.wait();
  stop_pending_ = false;
}

// Whether this step's loss or a gradient is NaN or infinite (on any rank,
// under skip_step, so every rank skips alike; async ranks decide alone).
// Under stop, the rank that finds one throws DivergedError: nothing more is
// saved, so the checkpoints written so far stay and no model.pt is written.
// When the gradients are averaged (identical on every rank), every rank
// finds the same NaN: they then agree on whose loss it came from, and all
// report that rank and its batch.
bool Worker::nonfinite_step(const at::Tensor& loss, int64_t epoch, int64_t batch_index,
                            const std::vector<int64_t>& samples) {
  const bool skip_mode = recipe_.train.on_nonfinite == OnNonFinite::kSkipStep;
  // On a GPU, a verdict every step would make the host wait for each
  // backward (and launch kernels per parameter): under stop, the loss sum of
  // the log window, which a NaN or infinity poisons, is read where the host
  // waits anyway (check_gpu_nonfinite). A non-finite gradient makes the
  // weights, and so the next step's loss, non-finite.
  if (device_.is_cuda() && !skip_mode) return false;
  // A sum is non-finite when a term is, so one sum per tensor (no
  // allocation, one vectorised pass) clears almost every step; only when the
  // total is not finite (a NaN or infinity, or finite values that overflow
  // it) does the exact element check run. isfinite() on every gradient cost
  // 4 ms of a 14 ms step on a 1.8 M-parameter MLP; the sums cost 0.1 ms.
  std::vector<at::Tensor> sums{loss.detach().sum().to(at::kDouble)};
  for (const auto& [name, p] : params_) {
    if (p.grad().defined()) sums.push_back(p.grad().sum().to(at::kDouble));
  }
  bool bad = !std::isfinite(at::stack(sums).sum().item<double>());
  if (bad) {
    std::vector<at::Tensor> checks{loss.detach().isfinite().all()};
    for (const auto& [name, p] : params_) {
      if (p.grad().defined()) checks.push_back(p.grad().isfinite().all());
    }
    bad = !at::stack(checks).all().item<bool>();
  }
  if (skip_mode && algorithm_->traits.synchronous) {
    at::Tensor any = torch::tensor({bad ? 1.0f : 0.0f});
    allreduce(any, ReduceOp::MAX, control_);
    bad = any.item<float>() > 0;
  }
  if (!bad) return false;
  if (skip_mode) {
    ++nonfinite_skips_;
    if (nonfinite_skips_ == 1 || nonfinite_skips_ % 100 == 0) {
      log_->say("WARNING: step " + std::to_string(pos_.step + 1) + ": a loss or gradient is NaN or infinite; "
                "skipped that optimizer step on every worker (" + std::to_string(nonfinite_skips_) +
                " so far; train.on_nonfinite: skip_step)");
    }
    return true;
  }
  auto non_finite = [](const at::Tensor& t) { return !t.isfinite().all().item<bool>(); };
  std::string shared_grad;  // an averaged gradient that is non-finite: the same on every rank
  if (algorithm_->traits.replicas_identical && algorithm_->traits.synchronous) {
    for (const auto& [name, p] : ddp_->bagua_build_params()) {
      if (p.grad().defined() && non_finite(p.grad())) {
        shared_grad = name;
        break;
      }
    }
  }
  std::string what;
  int culprit = rank_;
  std::vector<int64_t> culprit_samples = samples;
  if (!shared_grad.empty()) {
    // Every rank is here, at this step: which ranks' losses were not finite?
    at::Tensor mine = loss.detach().to(at::kCPU, at::kDouble).sum().reshape({1});
    at::Tensor all = torch::zeros({world_}, torch::kDouble);
    allgather(mine, all, control_);
    std::vector<int> ranks;
    for (int r = 0; r < world_; ++r) {
      if (!std::isfinite(all[r].item<double>())) ranks.push_back(r);
    }
    if (ranks.empty()) {
      what = "the averaged gradient of " + shared_grad + " holds NaN or infinity (every rank's loss was finite)";
    } else {
      culprit = ranks.front();
      what = "the loss was " + std::to_string(all[culprit].item<double>()) + " on rank " + std::to_string(culprit);
      if (ranks.size() > 1) what += " (and on " + std::to_string(ranks.size() - 1) + " other rank(s))";
      what += ", which made every rank's averaged gradient non-finite";
      culprit_samples = sampler_->batches(epoch, culprit).at(batch_index);
    }
  } else if (non_finite(loss.detach())) {
    what = "the loss was " + std::to_string(loss.detach().to(torch::kDouble).sum().item<double>()) + " on rank " +
           std::to_string(rank_);
  } else {
    for (const auto& [name, p] : params_) {
      if (p.grad().defined() && non_finite(p.grad())) {
        what = "the gradient of " + name + " holds NaN or infinity on rank " + std::to_string(rank_);
        break;
      }
    }
  }
  std::string indices;
  const size_t shown = std::min<size_t>(culprit_samples.size(), 32);
  for (size_t i = 0; i < shown; ++i) indices += (i ? ", " : "") + std::to_string(culprit_samples[i]);
  if (shown < culprit_samples.size()) indices += ", ... (" + std::to_string(culprit_samples.size()) + " in all)";
  throw DivergedError("the training diverged at step " + std::to_string(pos_.step + 1) + " (epoch " +
                      std::to_string(epoch + 1) + "): " + what + ". The batch of rank " + std::to_string(culprit) +
                      " held training samples [" + indices + "] (0-based indices into data.train). Nothing was "
                      "saved after the previous step: the checkpoints written so far are kept and no model.pt was "
                      "written. Lower the learning rate, check those samples, or set train.on_nonfinite: skip_step");
}

// The GPU's deferred verdict (see nonfinite_step): throws when the loss was
// non-finite in the window read so far, before anything is saved.
void Worker::check_gpu_nonfinite() {
  if (!device_.is_cuda() || recipe_.train.on_nonfinite != OnNonFinite::kStop || !window_loss_sum_.defined()) return;
  const bool bad = !std::isfinite(window_loss_sum_.item<double>());
  if (!bad) {
    gpu_clean_step_ = pos_.step;
    return;
  }
  throw DivergedError("the training diverged on rank " + std::to_string(rank_) + " between step " +
                      std::to_string(gpu_clean_step_ + 1) + " and step " + std::to_string(pos_.step) +
                      ": a loss or gradient was NaN or infinite (on a GPU the check is read at each log record, "
                      "checkpoint and evaluation, so the step is not exact; train.on_nonfinite: skip_step checks "
                      "every step). Nothing was saved after step " + std::to_string(gpu_clean_step_) +
                      ": the checkpoints written so far are kept and no model.pt was written. Lower the learning "
                      "rate, or set train.on_nonfinite: skip_step");
}

// Logs the window since the last record (one allreduce over the ranks) or
// redraws the progress bar.
// bucket_size: auto: once the module has chosen, says what it tried and
// chose (log and metrics.jsonl), and keeps the choice for checkpoints.
void Worker::report_autotune() {
  if (tuned_bucket_bytes_ > 0 || !ddp_->autotune_result()) return;
  const AutotuneResult& r = *ddp_->autotune_result();
  tuned_bucket_bytes_ = r.chosen_bucket_bytes;
  nlohmann::json trials = nlohmann::json::array();
  std::string tried;
  for (const auto& t : r.trials) {
    trials.push_back({{"bucket_bytes", t.bucket_bytes}, {"buckets", t.buckets}, {"step_s", t.step_seconds}});
    char line[96];
    std::snprintf(line, sizeof(line), "%s%lld B (%lld bucket%s) %.2f ms", tried.empty() ? "" : ", ",
                  static_cast<long long>(t.bucket_bytes), static_cast<long long>(t.buckets), t.buckets == 1 ? "" : "s",
                  t.step_seconds * 1e3);
    tried += line;
  }
  log_->record(nlohmann::json({{"step", pos_.step},
                               {"autotune", {{"bucket_bytes", r.chosen_bucket_bytes}, {"trials", trials}}}})
                   .dump());
  log_->say("bucket_size auto: chose " + std::to_string(r.chosen_bucket_bytes) + " bytes per bucket after step " +
            std::to_string(r.at_step) + "; tried (median step of the slowest worker): " + tried);
}

// One line and one metrics.jsonl record: each worker's peak resident set.
void Worker::report_peak_memory(const at::Tensor& per_rank_bytes) {
  nlohmann::json bytes = nlohmann::json::array();
  int64_t most = 0;
  int at = 0;
  for (int r = 0; r < world_; ++r) {
    const auto b = static_cast<int64_t>(per_rank_bytes[r].item<double>());
    bytes.push_back(b);
    if (b > most) most = b, at = r;
  }
  log_->record(nlohmann::json({{"step", pos_.step}, {"peak_rss_bytes", bytes}}).dump());
  char line[128];
  std::snprintf(line, sizeof(line), "peak memory (RSS) per worker: at most %.0f MiB (rank %d)",
                static_cast<double>(most) / (1 << 20), at);
  log_->say(line);
}

void Worker::record_step(int64_t epoch, int64_t samples, const Batch& batch) {
  window_steps_ += 1;
  window_samples_ += static_cast<double>(samples);
  window_padding_ += static_cast<double>(batch.padding);
  window_elements_ += static_cast<double>(batch.input.numel());
  if (batch.input.scalar_type() == at::kLong) padded_input_ = true;  // token sequences: padding is reported
  if (pos_.step % recipe_.train.log_every_steps != 0 && pos_.step != total_) {
    log_->tick(pos_.step, epoch + 1);
    return;
  }
  check_gpu_nonfinite();
  const int64_t bytes_now = ddp_->bytes_sent();
  at::Tensor w = torch::tensor(
      {window_loss_sum_.item<double>(), window_steps_, window_samples_, window_padding_, window_elements_},
      torch::kDouble);
  // Async ranks do not wait for each other: rank 0 reports its own window.
  if (algorithm_->traits.synchronous) allreduce(w, ReduceOp::SUM, control_);
  auto now = std::chrono::steady_clock::now();
  double seconds = std::chrono::duration<double>(now - window_start_).count();
  outcome_.last_loss = w[0].item<double>() / std::max(1.0, w[1].item<double>());
  log_->step({pos_.step, epoch + 1, outcome_.last_loss, built_.optimizers[0]->param_groups()[0].options().get_lr(),
              seconds > 0 ? w[2].item<double>() / seconds : 0.0, log_->elapsed(), bytes_now - window_bytes_start_,
              recipe_.train.on_nonfinite == OnNonFinite::kSkipStep ? std::optional<int64_t>(nonfinite_skips_)
                                                                    : std::nullopt,
              padded_input_ ? std::optional<double>(w[3].item<double>() / std::max(1.0, w[4].item<double>()))
                            : std::nullopt,
              built_.optimizers.size() > 1 ? train::current_lrs(built_.optimizers) : std::vector<double>{}});
  window_loss_sum_.zero_();
  window_steps_ = window_samples_ = window_padding_ = window_elements_ = 0;
  window_bytes_start_ = bytes_now;
  window_start_ = now;
}

void Worker::loop() {
  // The loss is summed on the training device and read once per log window,
  // so a GPU run does not wait for every step to finish.
  window_loss_sum_ = torch::zeros({}, at::TensorOptions().dtype(torch::kDouble).device(device_));
  window_start_ = std::chrono::steady_clock::now();
  window_bytes_start_ = ddp_->bytes_sent();
  bool done = pos_.step >= total_;
  for (int64_t epoch = pos_.epoch; !done && epoch < recipe_.train.epochs; ++epoch) {
    auto batches = sampler_->batches(epoch, rank_);
    int64_t b = epoch == pos_.epoch ? pos_.batch_in_epoch : 0;
    for (; b < static_cast<int64_t>(batches.size()) && pos_.step < total_; ++b) {
      maybe_inject_fault(rank_, pos_.step);
      progress_->step(pos_.step);
      trace_->begin_step(pos_.step + 1);
      phase(train::Phase::kCoordination, "control: stop vote");
      if (stop_requested_by_any_rank()) {
        pos_.epoch = epoch;
        pos_.batch_in_epoch = b;
        save(pos_);
        log_->say("stopped by a signal at step " + std::to_string(pos_.step) + "; checkpoint written, resume with "
                  "the same command");
        outcome_.stopped = true;
        return;
      }
      phase(train::Phase::kData, "data");
      Batch data_batch = to_device(train_data_->get_batch(batches[b]), device_);
      for (size_t i = 0; i < built_.optimizers.size(); ++i) {
        train::set_lr(*built_.optimizers[i],
                      train::scheduled_lr(recipe_.scheduler, built_.base_lrs[i], pos_.step, total_));
      }
      ddp_->zero_grad();
      phase(train::Phase::kForward, "forward");
      maybe_inject_stop(rank_, pos_.step);
      at::Tensor loss = recipe_.model.loss == Loss::kModel
                            ? forward_output(module_, ddp_.get(), {data_batch.input, data_batch.target})
                            : train::compute_loss(recipe_.model.loss,
                                                  forward_output(module_, ddp_.get(), {data_batch.input}),
                                                  data_batch.target);
      loss = maybe_inject_nan(rank_, pos_.step, loss);
      phase(train::Phase::kBackward, "backward");  // with the communication it overlaps and waits for
      loss.backward();
      phase(train::Phase::kOptimizer, "optimizer");
      const bool skip = nonfinite_step(loss, epoch, b, batches[b]);  // throws under on_nonfinite: stop
      if (!skip) ddp_->step();
      ++pos_.step;
      progress_->step(pos_.step);
      phase(train::Phase::kCoordination, "metrics");
      if (!skip) window_loss_sum_.add_(loss.detach().to(torch::kDouble));
      record_step(epoch, static_cast<int64_t>(batches[b].size()), data_batch);
      report_autotune();
      const bool epoch_ends = b + 1 == static_cast<int64_t>(batches.size());
      if (recipe_.train.eval_every.kind == EvalSchedule::Kind::kSteps &&
          pos_.step % recipe_.train.eval_every.steps == 0) {
        evaluate(epoch);
      }
      if (recipe_.checkpoint.every_steps && pos_.step % *recipe_.checkpoint.every_steps == 0 && pos_.step < total_) {
        save(epoch_ends ? train::Position{pos_.step, epoch + 1, 0} : train::Position{pos_.step, epoch, b + 1});
      }
      trace_->end_step();
    }
    if (b < static_cast<int64_t>(batches.size())) {  // max_steps reached inside the epoch
      pos_.epoch = epoch;
      pos_.batch_in_epoch = b;
    } else {  // the epoch is complete
      outcome_.epochs_completed = epoch + 1;
      if (recipe_.train.eval_every.kind == EvalSchedule::Kind::kEpoch) evaluate(epoch);
      pos_.epoch = epoch + 1;
      pos_.batch_in_epoch = 0;
      if (!recipe_.checkpoint.every_steps && pos_.step < total_) save(pos_);
    }
    if (pos_.step >= total_) done = true;
  }
}

void Worker::finish() {
  phase(train::Phase::kFinishing);
  check_gpu_nonfinite();
  finishing_ = true;
  side_work_begin();  // async: the weights stop moving before they are checked and saved
  if (!outcome_.stopped) {
    // The run ended between scheduled evaluations (max_steps): evaluate the final model.
    if (recipe_.train.eval_every.kind != EvalSchedule::Kind::kNever && last_eval_step_ != pos_.step && pos_.step > 0) {
      evaluate(std::min(pos_.epoch, recipe_.train.epochs - 1));
    }
    // Compare the ranks' weights once at the end (a checksum per rank):
    // identical for algorithms that promise it, so silent divergence cannot
    // pass; reported as the spread for those that keep per-rank weights.
    std::vector<at::Tensor> parts;
    for (const auto& [name, p] : ddp_->bagua_build_params()) {
      parts.push_back(p.detach().reshape({-1}).to(torch::kCPU, torch::kDouble));
    }
    // (None at all when model.ignore_params matches every parameter.)
    at::Tensor flat = parts.empty() ? torch::zeros({0}, torch::kDouble) : torch::cat(parts);
    // With each rank's peak resident memory so far, for the log.
    struct rusage usage {};
    getrusage(RUSAGE_SELF, &usage);
    const double peak_rss = static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux: KiB
    at::Tensor mine = torch::stack({flat.sum(), (flat * torch::arange(flat.numel(), torch::kDouble)).sum(),
                                    torch::tensor(peak_rss, torch::kDouble)});
    at::Tensor all = torch::zeros({world_, 3}, torch::kDouble);
    allgather(mine, all, control_);
    bool agree = true;
    for (int r = 1; r < world_; ++r) agree = agree && torch::equal(all[r].narrow(0, 0, 2), all[0].narrow(0, 0, 2));
    report_peak_memory(all.select(1, 2));
    const std::string except = recipe_.model.ignore_params.empty() ? "" : " (ignored parameters excepted)";
    if (parts.empty()) {
      log_->say(std::string("model.ignore_params matches every parameter: each worker trained its own model; "
                            "model.pt and the evaluations are ") +
                (algorithm_->traits.replicas_identical ? "rank 0's" : "of their average"));
    } else if (agree) {
      log_->say("final weights identical on all " + std::to_string(world_) + " workers" + except);
    } else if (algorithm_->traits.replicas_identical) {
      log_->say("WARNING: final weights differ between workers");
    } else {
      log_->say("final weights differ between workers, as " + recipe_.algorithm.name +
                " keeps one model per worker; model.pt and the evaluations are of their average");
    }
    save(pos_);  // the final state: a later `resume: auto` finds the run complete
    with_average_model([&] {
      if (rank_ != 0) return;
      if (device_.is_cpu()) {
        train::save_module(module_, (out_dir_ / "model.pt").string());
      } else {
        // A host copy, so model.pt loads on machines without a GPU too.
        torch::jit::Module host = module_.clone();
        host.to(torch::kCPU);
        train::save_module(host, (out_dir_ / "model.pt").string());
      }
      log_->say("done: " + std::to_string(pos_.step) + " steps; model in " + (out_dir_ / "model.pt").string());
    });
  }
  drain_stop_votes();
  outcome_.steps = pos_.step;
  barrier(control_);
}

}  // namespace

TrainOutcome run_worker(const Recipe& recipe) {
  check_supported(recipe);
  std::signal(SIGTERM, request_stop);
  std::signal(SIGINT, request_stop);
  return Worker(recipe).run();
}

}  // namespace bagua
