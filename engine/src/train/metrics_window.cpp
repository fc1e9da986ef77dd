#include "train/metrics_window.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace bagua::train {

MetricsWindow::MetricsWindow(const at::Device& device, int64_t bytes_sent)
    : loss_sum_(torch::zeros({}, at::TensorOptions().dtype(torch::kDouble).device(device))),
      bytes_start_(bytes_sent),
      start_(std::chrono::steady_clock::now()) {}

void MetricsWindow::add_loss(const at::Tensor& loss) { loss_sum_.add_(loss.detach().to(torch::kDouble)); }

void MetricsWindow::add_step(int64_t samples, const Batch& batch) {
  steps_ += 1;
  samples_ += static_cast<double>(samples);
  add_micro_batch(batch);
}

void MetricsWindow::add_micro_batch(const Batch& batch) {
  padding_ += static_cast<double>(batch.padding);
  elements_ += static_cast<double>(batch.input.numel());
  if (batch.input.scalar_type() == at::kLong) token_input_ = true;
}

MetricsWindow::Figures MetricsWindow::close(int64_t bytes_sent, const ProcessGroupPtr& sum_over, int64_t counted) {
  at::Tensor w = torch::tensor(
      {loss_sum_.item<double>(), steps_, samples_, padding_, elements_, static_cast<double>(counted)}, torch::kDouble);
  if (sum_over) allreduce(w, ReduceOp::SUM, sum_over);
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - start_).count();
  Figures f;
  f.mean_loss = w[0].item<double>() / std::max(1.0, w[1].item<double>());
  f.samples_per_s = seconds > 0 ? w[2].item<double>() / seconds : 0.0;
  f.comm_bytes = bytes_sent - bytes_start_;
  if (token_input_) f.padding = w[3].item<double>() / std::max(1.0, w[4].item<double>());
  f.total = static_cast<int64_t>(std::llround(w[5].item<double>()));
  loss_sum_.zero_();
  steps_ = samples_ = padding_ = elements_ = 0;
  bytes_start_ = bytes_sent;
  start_ = now;
  return f;
}

bool DivergenceWatch::add(int64_t step, double mean_loss) {
  if (!std::isfinite(mean_loss)) return false;
  bool diverging = false;
  if (!first_loss_) {
    first_loss_ = mean_loss;
  } else if (mean_loss > 1.5 * *best_loss_ && mean_loss > *first_loss_) {
    diverging = true;
    if (first_.empty()) {
      char line[256];
      std::snprintf(line, sizeof(line),
                    "step %lld: mean loss %.6g is more than 1.5 times the best (%.6g at step %lld) and above the "
                    "first record's (%.6g)",
                    static_cast<long long>(step), mean_loss, *best_loss_, static_cast<long long>(best_step_),
                    *first_loss_);
      first_ = line;
    }
  }
  if (!best_loss_ || mean_loss < *best_loss_) {
    best_loss_ = mean_loss;
    best_step_ = step;
  }
  return diverging;
}

}  // namespace bagua::train
