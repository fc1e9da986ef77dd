// run_worker(): the training loop of one rank.
#include <bagua/algorithms/registry.h>
#include <bagua/communication.h>
#include <bagua/data.h>
#include <bagua/distributed.h>
#include <bagua/errors.h>
#include <bagua/trainer.h>

#include "comm/c10d_compat.h"
#include "train/checkpoint.h"
#include "train/components.h"
#include "train/run_log.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <unistd.h>

#include <atomic>
#include <ctime>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

namespace fs = std::filesystem;

namespace bagua {
namespace {

std::atomic<bool> g_stop_requested{false};
extern "C" void request_stop(int) { g_stop_requested = true; }

// A testing aid (docs/run.md): BAGUA_FAULT_AT_STEP=RANK:STEP makes that rank
// kill itself with SIGKILL when it reaches that step, in the first attempt
// of a run only (not after a max_restarts restart).
void maybe_inject_fault(int rank, int64_t step) {
  static const char* spec = std::getenv("BAGUA_FAULT_AT_STEP");
  if (spec == nullptr) return;
  const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");  // fire in the first attempt only
  if (restarts != nullptr && std::string(restarts) != "0") return;
  int fault_rank = -1;
  long long fault_step = -1;
  if (std::sscanf(spec, "%d:%lld", &fault_rank, &fault_step) == 2 && fault_rank == rank && fault_step == step) {
    std::fprintf(stderr, "BAGUA_FAULT_AT_STEP: rank %d kills itself at step %lld\n", rank, fault_step);
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
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
EvalResult evaluate(const Recipe& recipe, torch::jit::Module& module, const Dataset& dataset,
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
  bool known = false;
  for (const auto& spec : algorithm_registry()) known = known || spec.name == recipe.algorithm.name;
  if (!known) unsupported("algorithm.name", "algorithm '" + recipe.algorithm.name + "'");
  if (recipe.data.sampler.type == SamplerType::kLoadBalancing) {
    unsupported("data.sampler.type", "the load_balancing sampler");
  }
  if (recipe.data.cache) unsupported("data.cache", "the Redis dataset cache");
  if (recipe.train.device == Device::kCuda && torch::cuda::device_count() == 0) throw no_gpu_error();
  for (size_t i = 0; i < recipe.optimizers.size(); ++i) {
    if (recipe.optimizers[i].type == OptimizerType::kQAdam) {
      unsupported("optimizers[" + std::to_string(i) + "].type", "the qadam optimizer");
    }
    if (recipe.optimizers[i].fused) unsupported("optimizers[" + std::to_string(i) + "].fused", "fused optimizers");
  }
}

void check_data(const Recipe& recipe) {
  load_dataset(recipe.data.train, target_kind_for(recipe.model.loss));
  if (recipe.data.eval) load_dataset(*recipe.data.eval, target_kind_for(recipe.model.loss));
}

TrainOutcome run_worker(const Recipe& recipe) {
  check_supported(recipe);
  std::signal(SIGTERM, request_stop);
  std::signal(SIGINT, request_stop);

  // The device first: a worker on the CPU never asks for NCCL.
  const char* local_rank_env = std::getenv("LOCAL_RANK");
  const at::Device device = pick_device(recipe.train.device, local_rank_env ? std::atoi(local_rank_env) : 0);
  InitOptions init;
  init.timeout = std::chrono::seconds(recipe.distributed.timeout_s);
  init.backend = device.is_cpu() && recipe.distributed.backend == Backend::kAuto
                     ? "gloo"
                     : to_string(recipe.distributed.backend);
  if (!is_initialized()) init_process_group(init);
  const int rank = get_rank(), world = get_world_size();
  at::set_num_threads(recipe.train.threads.value_or(default_threads()));
  const fs::path out_dir = recipe.output.dir;
  const fs::path ckpt_dir = out_dir / "checkpoints";
  fs::create_directories(out_dir);

  torch::manual_seed(recipe.train.seed);
  torch::jit::Module module = torch::jit::load(recipe.model.torchscript);
  module.to(device);
  module.train();
  auto train_data = load_dataset(recipe.data.train, target_kind_for(recipe.model.loss));
  std::shared_ptr<Dataset> eval_data;
  if (recipe.data.eval) eval_data = load_dataset(*recipe.data.eval, target_kind_for(recipe.model.loss));

  std::vector<std::pair<std::string, at::Tensor>> params, buffers;
  for (const auto& p : module.named_parameters(true)) params.emplace_back(p.name, p.value);
  for (const auto& b : module.named_buffers(true)) buffers.emplace_back(b.name, b.value);
  auto built = train::build_optimizers(recipe.optimizers, params);

  // The loop's own small collectives (stop flags, metrics, checksums) on
  // CPU tensors over Gloo, so they never wait on the GPU's stream.
  auto control = default_group()->duplicate("gloo");
  control->set_verify_collectives(false);

  TrainOutcome outcome;
  train::Position pos;
  if (recipe.checkpoint.resume == "never") {
    // A fresh run must not mix its checkpoints with an earlier run's: pruning
    // and a later restart would pick the old ones up.
    std::string moved;
    if (get_rank() == 0 && fs::exists(ckpt_dir) && !fs::is_empty(ckpt_dir)) {
      fs::path aside = out_dir / ("checkpoints-before-" + std::to_string(std::time(nullptr)));
      fs::rename(ckpt_dir, aside);
      moved = aside.string();
    }
    broadcast_object(moved, 0, default_group());
    if (rank == 0 && !moved.empty()) {
      std::fprintf(stderr, "checkpoint.resume is never: moved the earlier run's checkpoints to %s\n", moved.c_str());
    }
  } else {
    std::string explicit_path = recipe.checkpoint.resume == "auto" ? "" : recipe.checkpoint.resume;
    if (auto resumed = train::resume_checkpoint(ckpt_dir.string(), explicit_path, params, buffers,
                                                built.optimizers, default_group(), &outcome.resumed_from)) {
      pos = *resumed;
    }
  }

  WithBaguaOptions wopts;
  wopts.do_flatten = recipe.algorithm.flatten;
  wopts.bucket_bytes = recipe.algorithm.bucket_size;
  wopts.parameters_to_ignore = recipe.model.ignore_params;
  auto ddp = with_bagua(module, built.optimizers, make_algorithm(recipe.algorithm.name, recipe.algorithm.kwargs),
                        wopts);

  const auto& ss = recipe.data.sampler;
  DistributedSampler sampler(train_data->size(), world, rank, ss.shuffle, ss.seed, ss.drop_last);
  const int64_t batch = recipe.data.batch_size;
  const int64_t per_epoch = ss.drop_last ? sampler.num_samples() / batch
                                         : (sampler.num_samples() + batch - 1) / batch;
  if (per_epoch == 0) {
    throw Error(sampler.num_samples() == 0
                    ? std::string("the training set gives this worker no samples: no step would run")
                    : "data.batch_size " + std::to_string(batch) + " is larger than this worker's " +
                          std::to_string(sampler.num_samples()) + " samples and drop_last is on: no step would run",
                true);
  }
  int64_t total = per_epoch * recipe.train.epochs;
  if (recipe.train.max_steps) total = std::min(total, *recipe.train.max_steps);

  train::RunLog log((out_dir / "metrics.jsonl").string(), rank == 0, total, !outcome.resumed_from.empty(),
                    pos.step);
  if (rank == 0) {
    std::ofstream(out_dir / "recipe.resolved.yaml") << resolved_recipe_yaml(recipe);
    log.say("bagua run " + recipe.name + ": " + std::to_string(world) + " workers on " +
            (device.is_cpu() ? std::string("CPUs") : "GPUs (rank 0 on " + device.str() + ")") + " over " +
            default_group()->backend() + ", " + recipe.algorithm.name + ", train " + train_data->describe());
    if (eval_data) log.say("eval " + eval_data->describe());
    log.say(std::to_string(per_epoch) + " steps per epoch of batch " + std::to_string(batch) + " per worker, " +
            std::to_string(total) + " steps in all; output in " + out_dir.string());
    for (const auto& name : built.unassigned) log.say("note: parameter " + name + " is in no optimizer: it stays fixed");
    if (!outcome.resumed_from.empty()) {
      log.say("resumed from " + outcome.resumed_from + " at step " + std::to_string(pos.step));
    }
  }

  auto save = [&](const train::Position& at) {
    train::save_checkpoint(ckpt_dir.string(), at, recipe, params, buffers, built.optimizers, default_group(),
                           recipe.checkpoint.keep);
  };
  int64_t last_eval_step = -1;
  auto run_eval = [&](int64_t epoch) {
    if (!eval_data) return;
    last_eval_step = pos.step;
    EvalResult e = evaluate(recipe, module, *eval_data, control, device);
    outcome.eval_loss = e.loss;
    outcome.eval_accuracy = e.accuracy;
    log.eval({pos.step, epoch + 1, e.loss, e.accuracy, e.samples, log.elapsed()});
  };

  at::Tensor stop_flag;
  Work stop_work;
  bool stop_pending = false;
  // The loss is summed on the training device and read once per log window,
  // so a GPU run does not wait for every step to finish.
  at::Tensor window_loss_sum = torch::zeros({}, at::TensorOptions().dtype(torch::kDouble).device(device));
  double window_samples = 0, window_steps = 0;
  auto window_start = std::chrono::steady_clock::now();
  bool done = pos.step >= total;
  for (int64_t epoch = pos.epoch; !done && epoch < recipe.train.epochs; ++epoch) {
    sampler.set_epoch(epoch);
    auto batches = make_batches(sampler.indices(), batch, ss.drop_last);
    int64_t b = epoch == pos.epoch ? pos.batch_in_epoch : 0;
    for (; b < static_cast<int64_t>(batches.size()) && pos.step < total; ++b) {
      maybe_inject_fault(rank, pos.step);
      // Did any rank ask to stop? The answer to the question asked one step
      // ago arrives now, so the allreduce never waits on the critical path;
      // every rank reads the same answer at the same step.
      bool stop_now = false;
      if (stop_pending) {
        stop_work.wait();
        stop_now = stop_flag.item<double>() > 0;
      }
      stop_flag = torch::tensor({g_stop_requested ? 1.0 : 0.0}, torch::kDouble);
      stop_work = allreduce_async(stop_flag, ReduceOp::MAX, control);
      stop_pending = true;
      if (stop_now) {
        pos.epoch = epoch;
        pos.batch_in_epoch = b;
        save(pos);
        log.say("stopped by a signal at step " + std::to_string(pos.step) + "; checkpoint written, resume with "
                "the same command");
        outcome.stopped = true;
        done = true;
        break;
      }
      Batch data_batch = to_device(train_data->get_batch(batches[b]), device);
      for (size_t i = 0; i < built.optimizers.size(); ++i) {
        train::set_lr(*built.optimizers[i], train::scheduled_lr(recipe.scheduler, built.base_lrs[i], pos.step, total));
      }
      ddp->zero_grad();
      at::Tensor loss = recipe.model.loss == Loss::kModel
                            ? forward_output(module, ddp.get(), {data_batch.input, data_batch.target})
                            : train::compute_loss(recipe.model.loss,
                                                  forward_output(module, ddp.get(), {data_batch.input}),
                                                  data_batch.target);
      loss.backward();
      ddp->step();
      ++pos.step;
      window_loss_sum.add_(loss.detach().to(torch::kDouble));
      window_steps += 1;
      window_samples += static_cast<double>(batches[b].size());
      if (pos.step % recipe.train.log_every_steps == 0 || pos.step == total) {
        at::Tensor w = torch::tensor({window_loss_sum.item<double>(), window_steps, window_samples}, torch::kDouble);
        allreduce(w, ReduceOp::SUM, control);
        auto now = std::chrono::steady_clock::now();
        double seconds = std::chrono::duration<double>(now - window_start).count();
        outcome.last_loss = w[0].item<double>() / std::max(1.0, w[1].item<double>());
        log.step({pos.step, epoch + 1, outcome.last_loss, built.optimizers[0]->param_groups()[0].options().get_lr(),
                  seconds > 0 ? w[2].item<double>() / seconds : 0.0, log.elapsed()});
        window_loss_sum.zero_();
        window_steps = window_samples = 0;
        window_start = now;
      } else {
        log.tick(pos.step, epoch + 1);
      }
      const bool epoch_ends = b + 1 == static_cast<int64_t>(batches.size());
      if (recipe.train.eval_every.kind == EvalSchedule::Kind::kSteps &&
          pos.step % recipe.train.eval_every.steps == 0) {
        run_eval(epoch);
      }
      if (recipe.checkpoint.every_steps && pos.step % *recipe.checkpoint.every_steps == 0 && pos.step < total) {
        save(epoch_ends ? train::Position{pos.step, epoch + 1, 0} : train::Position{pos.step, epoch, b + 1});
      }
    }
    if (done) break;
    if (b < static_cast<int64_t>(batches.size())) {  // max_steps reached inside the epoch
      pos.epoch = epoch;
      pos.batch_in_epoch = b;
    } else {  // the epoch is complete
      outcome.epochs_completed = epoch + 1;
      if (recipe.train.eval_every.kind == EvalSchedule::Kind::kEpoch) run_eval(epoch);
      pos.epoch = epoch + 1;
      pos.batch_in_epoch = 0;
      if (!recipe.checkpoint.every_steps && pos.step < total) save(pos);
    }
    if (pos.step >= total) done = true;
  }
  if (!outcome.stopped) {
    // The run ended between scheduled evaluations (max_steps): evaluate the final model.
    if (recipe.train.eval_every.kind != EvalSchedule::Kind::kNever && last_eval_step != pos.step && pos.step > 0) {
      run_eval(std::min(pos.epoch, recipe.train.epochs - 1));
    }
    // Synchronous algorithms keep every rank's weights identical; check it
    // once at the end (a checksum per rank) so silent divergence cannot pass.
    std::vector<at::Tensor> parts;
    for (const auto& [name, p] : ddp->bagua_build_params()) {
      parts.push_back(p.detach().reshape({-1}).to(torch::kCPU, torch::kDouble));
    }
    at::Tensor flat = torch::cat(parts);
    at::Tensor mine = torch::stack({flat.sum(), (flat * torch::arange(flat.numel(), torch::kDouble)).sum()});
    at::Tensor all = torch::zeros({world, 2}, torch::kDouble);
    allgather(mine, all, control);
    bool agree = true;
    for (int r = 1; r < world; ++r) agree = agree && torch::equal(all[r], all[0]);
    log.say(agree ? "final weights identical on all " + std::to_string(world) + " workers" +
                        (recipe.model.ignore_params.empty() ? "" : " (ignored parameters excepted)")
                  : "WARNING: final weights differ between workers");
    save(pos);  // the final state: a later `resume: auto` finds the run complete
    if (rank == 0) {
      if (device.is_cpu()) {
        module.save((out_dir / "model.pt").string());
      } else {
        // A host copy, so model.pt loads on machines without a GPU too.
        torch::jit::Module host = module.clone();
        host.to(torch::kCPU);
        host.save((out_dir / "model.pt").string());
      }
      log.say("done: " + std::to_string(pos.step) + " steps; model in " + (out_dir / "model.pt").string());
    }
  }
  if (stop_pending) stop_work.wait();
  outcome.steps = pos.step;
  barrier(control);
  return outcome;
}

}  // namespace bagua
