#include "train/nonfinite_guard.h"

#include <bagua/errors.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace bagua::train {

namespace {
int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

NonFiniteGuard::NonFiniteGuard(Options options, std::function<void(const std::string&)> warn)
    : options_(std::move(options)), warn_(std::move(warn)) {}

bool NonFiniteGuard::check_step(int64_t steps_done, int64_t epoch, const at::Tensor& loss, const NamedTensors& params,
                                const NamedTensors& averaged,
                                const std::function<std::vector<int64_t>(int rank)>& batch_of) {
  const bool skip_mode = options_.mode == OnNonFinite::kSkipStep;
  // On a GPU under stop: recorded on the GPU, read by check_window().
  if (options_.device.is_cuda() && !skip_mode) {
    const at::Tensor l = loss.detach();
    if (!first_bad_.defined()) first_bad_ = at::full({}, -1, l.options().dtype(at::kLong));
    if (next_step_ != steps_done) step_on_device_ = at::full({}, steps_done + 1, l.options().dtype(at::kLong));
    const at::Tensor newly_bad = first_bad_.lt(0).logical_and_(l.isfinite().all().logical_not());
    first_bad_ = at::where(newly_bad, step_on_device_, first_bad_);
    step_on_device_.add_(1);
    next_step_ = steps_done + 1;
    step_times_.emplace_back(steps_done + 1, unix_ms_now());
    return false;
  }
  // A sum is non-finite when a term is, so one sum per tensor (no
  // allocation, one vectorised pass) clears almost every step; only when the
  // total is not finite (a NaN or infinity, or finite values that overflow
  // it) does the exact element check run. isfinite() on every gradient cost
  // 4 ms of a 14 ms step on a 1.8 M-parameter MLP; the sums cost 0.1 ms.
  const NamedTensors state = options_.averaged_state ? options_.averaged_state() : NamedTensors{};
  std::vector<at::Tensor> sums{loss.detach().sum().to(at::kDouble)};
  for (const auto& [name, p] : params) {
    if (p.grad().defined()) sums.push_back(p.grad().sum().to(at::kDouble));
  }
  for (const auto& [name, t] : state) sums.push_back(t.sum().to(at::kDouble));
  bool bad = !std::isfinite(at::stack(sums).sum().item<double>());
  if (bad) {
    std::vector<at::Tensor> checks{loss.detach().isfinite().all()};
    for (const auto& [name, p] : params) {
      if (p.grad().defined()) checks.push_back(p.grad().isfinite().all());
    }
    for (const auto& [name, t] : state) checks.push_back(t.isfinite().all());
    bad = !at::stack(checks).all().item<bool>();
  }
  if (skip_mode && options_.synchronous) {
    at::Tensor any = torch::tensor({bad ? 1.0f : 0.0f});
    allreduce(any, ReduceOp::MAX, options_.control);
    bad = any.item<float>() > 0;
  }
  if (!bad) return false;
  if (skip_mode) {
    ++skips_;
    if (skips_ == 1 || skips_ % 100 == 0) {
      warn_("WARNING: step " + std::to_string(steps_done + 1) + ": a loss or gradient is NaN or infinite; "
            "skipped that optimizer step " +
            (options_.synchronous ? std::string("on every worker")
                                  : "on rank " + std::to_string(options_.rank) + " (async ranks skip alone)") +
            " (" + std::to_string(skips_) + " so far; train.on_nonfinite: skip_step)");
    }
    return true;
  }
  const int rank = options_.rank, world = options_.world;
  auto non_finite = [](const at::Tensor& t) { return !t.isfinite().all().item<bool>(); };
  std::string shared_grad;  // an averaged gradient that is non-finite: the same on every rank
  if (options_.replicas_identical && options_.synchronous) {
    for (const auto& [name, t] : state) {
      if (non_finite(t)) {
        shared_grad = name;
        break;
      }
    }
    for (const auto& [name, p] : averaged) {
      if (!shared_grad.empty()) break;
      if (p.grad().defined() && non_finite(p.grad())) {
        shared_grad = name;
        break;
      }
    }
  }
  std::string what;
  int culprit = rank;
  std::vector<int64_t> culprit_samples = batch_of(rank);
  if (!shared_grad.empty()) {
    // Every rank is here, at this step: which ranks' losses were not finite?
    at::Tensor mine = loss.detach().to(at::kCPU, at::kDouble).sum().reshape({1});
    at::Tensor all = torch::zeros({world}, torch::kDouble);
    allgather(mine, all, options_.control);
    std::vector<int> ranks;
    for (int r = 0; r < world; ++r) {
      if (!std::isfinite(all[r].item<double>())) ranks.push_back(r);
    }
    if (ranks.empty()) {
      what = "the averaged gradient of " + shared_grad + " holds NaN or infinity (every rank's loss was finite)";
    } else {
      culprit = ranks.front();
      what = "the loss was " + std::to_string(all[culprit].item<double>()) + " on rank " + std::to_string(culprit);
      if (ranks.size() > 1) what += " (and on " + std::to_string(ranks.size() - 1) + " other rank(s))";
      what += ", which made every rank's averaged gradient non-finite";
      culprit_samples = batch_of(culprit);
    }
  } else if (non_finite(loss.detach())) {
    what = "the loss was " + std::to_string(loss.detach().to(torch::kDouble).sum().item<double>()) + " on rank " +
           std::to_string(rank);
  } else {
    for (const auto& [name, p] : params) {
      if (p.grad().defined() && non_finite(p.grad())) {
        what = "the gradient of " + name + " holds NaN or infinity on rank " + std::to_string(rank);
        break;
      }
    }
  }
  std::string indices;
  const size_t shown = std::min<size_t>(culprit_samples.size(), 32);
  for (size_t i = 0; i < shown; ++i) indices += (i ? ", " : "") + std::to_string(culprit_samples[i]);
  if (shown < culprit_samples.size()) indices += ", ... (" + std::to_string(culprit_samples.size()) + " in all)";
  // Only the rank whose own loss or gradient it was: the launcher names the
  // earliest of those that tell it.
  if (options_.diverged && culprit == rank) options_.diverged(unix_ms_now());
  throw DivergedError("the training diverged at step " + std::to_string(steps_done + 1) + " (epoch " +
                      std::to_string(epoch + 1) + "): " + what + ". The batch of rank " + std::to_string(culprit) +
                      " held training samples [" + indices + "] (0-based indices into data.train). Nothing was "
                      "saved after the previous step: the checkpoints written so far are kept and no model.pt was "
                      "written. Lower the learning rate, check those samples, or set train.on_nonfinite: skip_step");
}

void NonFiniteGuard::check_window(int64_t steps_done) {
  if (!options_.device.is_cuda() || options_.mode != OnNonFinite::kStop) return;
  // Every rank of a synchronous algorithm is here: they agree.
  const bool agree = options_.synchronous && options_.world > 1 && options_.control;
  if (!first_bad_.defined() && !agree) {
    clean_step_ = steps_done;
    step_times_.clear();
    return;
  }
  const int64_t mine = first_bad_.defined() ? first_bad_.item<int64_t>() : -1;
  std::vector<int64_t> firsts{mine};
  if (agree) {
    at::Tensor all = torch::zeros({options_.world}, torch::kLong);
    allgather(torch::tensor({mine}, torch::kLong), all, options_.control);
    firsts.assign(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + options_.world);
  }
  int64_t step = -1;
  for (int64_t s : firsts)
    if (s > 0 && (step < 0 || s < step)) step = s;
  if (step < 0) {
    clean_step_ = steps_done;
    step_times_.clear();
    return;
  }
  if (mine > 0) report_divergence(mine);
  std::vector<int> ranks;  // whose loss was not finite at that step
  for (size_t r = 0; r < firsts.size(); ++r)
    if (firsts[r] == step) ranks.push_back(agree ? static_cast<int>(r) : options_.rank);
  std::string who = "rank " + std::to_string(ranks.front());
  if (ranks.size() > 1) who += " (and on " + std::to_string(ranks.size() - 1) + " other rank(s))";
  throw DivergedError("the training diverged at step " + std::to_string(step) + ": the loss was NaN or infinite on " +
                      who + (agree ? ", the first rank and step to find one" : "") +
                      " (on a GPU each step's loss is checked on the GPU and the verdict read at the next log "
                      "record, checkpoint or evaluation, here after step " + std::to_string(steps_done) +
                      "). Nothing was saved after step " + std::to_string(clean_step_) +
                      ": the checkpoints written so far are kept and no model.pt was written. Lower the learning "
                      "rate, or set train.on_nonfinite: skip_step");
}

void NonFiniteGuard::report_divergence(int64_t step) const {
  if (!options_.diverged) return;
  int64_t when = unix_ms_now();
  for (const auto& [s, ms] : step_times_) {
    if (s == step) {
      when = ms;
      break;
    }
  }
  options_.diverged(when);
}

void NonFiniteGuard::algorithm_found_divergence(const DivergedError& found, int64_t steps_done) {
  if (options_.device.is_cuda() && options_.mode == OnNonFinite::kStop) check_window(steps_done);
  throw found;
}

}  // namespace bagua::train
