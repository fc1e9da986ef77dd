// The figures of one log window (the steps since the last metrics.jsonl
// record): the loss summed where it was computed (on a GPU it is read once
// per window, so the host never waits for a step), samples, steps, padding
// and the algorithm's bytes.
//
// Contract:
//   - add_loss() adds a step's loss without reading it (a skipped step adds
//     none but still counts in add_step()).
//   - close() sums the window over `sum_over`'s ranks (null: this rank
//     alone, as asynchronous algorithms report), returns the window's
//     figures and starts the next one. Collective over `sum_over`.
//   - mean_loss is the summed loss over the summed steps (NaN when a loss
//     was; 0 for a window without steps); samples_per_s counts every rank's
//     samples over this rank's wall time of the window; padding is the
//     share of input elements that were padding, only for token inputs
//     (int64), else empty; `counted` (a per-rank running count, such as
//     the unreadable images a rank skipped) comes back summed as `total`.
#pragma once

#include <bagua/communication.h>
#include <bagua/data.h>

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace bagua::train {

class MetricsWindow {
 public:
  // `bytes_sent`: the algorithm's byte counter now (the window's bytes are
  // the counter's growth).
  MetricsWindow(const at::Device& device, int64_t bytes_sent);

  void add_loss(const at::Tensor& loss);
  void add_step(int64_t samples, const Batch& batch);
  // A micro-batch before a step's last (train.grad_accum_steps): its
  // padding and elements count, the step is counted by add_step().
  void add_micro_batch(const Batch& batch);

  // The loss summed so far in this window (on the training device).
  const at::Tensor& loss_sum() const { return loss_sum_; }
  int64_t steps() const { return static_cast<int64_t>(steps_); }

  struct Figures {
    double mean_loss = 0;
    double samples_per_s = 0;
    int64_t comm_bytes = 0;
    std::optional<double> padding;
    int64_t total = 0;  // `counted`, summed
  };
  Figures close(int64_t bytes_sent, const ProcessGroupPtr& sum_over, int64_t counted = 0);

 private:
  at::Tensor loss_sum_;
  double samples_ = 0, steps_ = 0;
  double padding_ = 0, elements_ = 0;  // input elements that were padding, and all
  bool token_input_ = false;           // token sequences, whose padding is reported
  int64_t bytes_start_ = 0;
  std::chrono::steady_clock::time_point start_;
};

// A training loss that rose far above its best (docs/run.md, "Failures
// and signals"): a record is diverging when its mean loss is finite, more
// than 1.5 times the lowest mean of the run's earlier records, and above the
// run's first record (it has climbed back past where training started).
// Records of a resumed run count from the resume. Non-finite losses are
// train.on_nonfinite's business and are not counted here.
class DivergenceWatch {
 public:
  // This record's mean loss; returns whether it is diverging.
  bool add(int64_t step, double mean_loss);
  // The first diverging record, described for the log ("" when none).
  const std::string& first() const { return first_; }
  bool ever() const { return !first_.empty(); }

 private:
  std::optional<double> first_loss_, best_loss_;
  int64_t best_step_ = 0;
  std::string first_;
};

}  // namespace bagua::train
