#include "train/best_model.h"

#include <bagua/errors.h>

#include "common/libtorch_compat.h"
#include "train/checkpoint.h"
#include "train/checkpoint_files.h"

#include <cmath>
#include <cstdio>

namespace fs = std::filesystem;

namespace bagua::train {

bool improves(double value, const BestEvaluation& best, double min_delta) {
  if (std::isnan(value)) return false;
  if (std::isnan(best.value)) return true;
  return best.goal.mode == MetricMode::kMin ? value < best.value - min_delta : value > best.value + min_delta;
}

bool judge(BestEvaluation& best, const metrics::EvalRecord& r, double min_delta) {
  const auto value = metrics::eval_figure(r, to_string(best.goal.metric));
  if (!value || !improves(*value, best, min_delta)) {
    best.evaluations_since += 1;
    return false;
  }
  best.value = *value;
  best.step = r.step;
  best.epoch = r.epoch;
  best.evaluations_since = 0;
  return true;
}

void require_figure(const EvalGoal& goal, const metrics::EvalRecord& r, const std::string& key) {
  const char* metric = to_string(goal.metric);
  if (metrics::eval_figure(r, metric)) return;
  throw Error(key + " watches " + metric + ", which this run's evaluations do not report (eval_accuracy: model.loss "
                  "cross_entropy or nll; eval_perplexity: cross_entropy over token sequences, outputs [B, T, V]); "
                  "watch eval_loss instead",
              true);
}

BestEvaluation resumed_best(const std::optional<BestEvaluation>& saved, const EvalGoal& goal) {
  if (saved && saved->goal.metric == goal.metric && saved->goal.mode == goal.mode) return *saved;
  return BestEvaluation{goal};
}

std::string figure_text(EvalMetric metric, double value) {
  char text[32];
  if (metric == EvalMetric::kEvalAccuracy) {
    std::snprintf(text, sizeof(text), "%.2f%%", 100.0 * value);
  } else if (metric == EvalMetric::kEvalPerplexity) {
    std::snprintf(text, sizeof(text), "%.2f", value);
  } else {
    std::snprintf(text, sizeof(text), "%.4f", value);
  }
  return text;
}

void recover_best_dir(const fs::path& out_dir) {
  const fs::path best = out_dir / "best", tmp = out_dir / ".best.tmp", aside = out_dir / ".best.old";
  std::error_code ec;
  if (!fs::exists(best, ec)) {
    // The new copy when it was complete (eval.json is written last), else the one it replaced.
    const fs::path whole = fs::exists(tmp / "eval.json", ec) ? tmp : aside;
    if (fs::exists(whole, ec)) fs::rename(whole, best, ec);
  }
  bagua::compat::remove_all(tmp, ec);
  bagua::compat::remove_all(aside, ec);
}

bool BestModel::after_evaluation(const torch::jit::Module& module, metrics::EvalRecord& r) {
  require_figure(state_.goal, r, "checkpoint.keep_best");
  if (!judge(state_, r)) return false;
  r.best = to_string(state_.goal.metric);
  if (writer_) keep(module, r);
  return true;
}

void BestModel::keep(const torch::jit::Module& module, const metrics::EvalRecord& r) const {
  const fs::path tmp = out_dir_ / ".best.tmp";
  bagua::compat::remove_all(tmp);
  fs::create_directories(tmp);
  save_host_module(module, (tmp / "model.pt").string());
  nlohmann::json record = metrics::to_json(r);
  record["metric"] = to_string(state_.goal.metric);
  record["mode"] = to_string(state_.goal.mode);
  write_text(tmp / "eval.json", record.dump(2) + "\n");
  fsync_path(tmp);
  replace_directory(tmp, out_dir_ / "best", out_dir_ / ".best.old");
}

}  // namespace bagua::train
