#include <bagua/report.h>

#include <bagua/errors.h>
#include <bagua/metrics.h>

#include <algorithm>

#include <cmath>
#include <fstream>

namespace bagua::report {

using json = nlohmann::json;

MetricsHistory read_metrics_history(const std::string& path) {
  MetricsHistory h;
  double segment_time = 0;  // the last "time" of the run (or resume) being read
  for (const auto& record : metrics::read_metrics_file(path)) {
    if (const auto* r = std::get_if<metrics::ResumeRecord>(&record)) {
      h.resumes += 1;
      h.resume_steps.push_back(r->step);
      if (r->previous_world_size > 0) {
        h.resizes += 1;
        h.resume_labels.push_back(std::to_string(r->previous_world_size) + " -> " + std::to_string(r->world_size) +
                                  " workers");
      } else {
        h.resume_labels.push_back("resumed");
      }
      h.total_time += segment_time;
      segment_time = 0;
    } else if (const auto* r = std::get_if<metrics::StepRecord>(&record)) {
      h.steps.push_back({r->step, r->loss, r->samples_per_s, r->time, r->grad_norm});
      segment_time = r->time;
    } else if (const auto* r = std::get_if<metrics::EvalRecord>(&record)) {
      h.evals.push_back({r->step, r->eval_loss, r->eval_accuracy});
      segment_time = std::max(segment_time, r->time);
      if (const auto value = metrics::eval_figure(*r, r->best); value && !r->best.empty()) {
        h.best_model = MetricsHistory::KeptBest{r->step, r->best, *value};
      }
      h.early_stop_step = r->early_stop ? std::optional<int64_t>(r->step) : std::nullopt;
    }
  }
  h.total_time += segment_time;
  return h;
}

json summarize_history(const MetricsHistory& h) {
  json s = {{"step_records", h.steps.size()}, {"evals", h.evals.size()}, {"resumes", h.resumes}, {"resizes", h.resizes},
            {"total_time_s", h.total_time}};
  int64_t last_step = 0;
  for (const auto& p : h.steps) last_step = std::max(last_step, p.step);
  for (const auto& e : h.evals) last_step = std::max(last_step, e.step);
  s["steps"] = last_step;
  s["final_step"] = nullptr;
  s["final_loss"] = nullptr;
  s["last_samples_per_s"] = nullptr;
  s["mean_samples_per_s"] = nullptr;
  if (!h.steps.empty()) {
    s["final_step"] = h.steps.back().step;
    s["final_loss"] = h.steps.back().loss;  // NaN dumps as null
    s["last_samples_per_s"] = h.steps.back().samples_per_s;
    double sum = 0;
    for (const auto& p : h.steps) sum += p.samples_per_s;
    s["mean_samples_per_s"] = sum / static_cast<double>(h.steps.size());
  }
  const EvalPoint* best_accuracy = nullptr;
  const EvalPoint* best_loss = nullptr;
  for (const auto& e : h.evals) {
    if (e.eval_accuracy && std::isfinite(*e.eval_accuracy) &&
        (!best_accuracy || *e.eval_accuracy > *best_accuracy->eval_accuracy)) {
      best_accuracy = &e;
    }
    if (std::isfinite(e.eval_loss) && (!best_loss || e.eval_loss < best_loss->eval_loss)) best_loss = &e;
  }
  s["best_eval_accuracy"] = best_accuracy ? json(*best_accuracy->eval_accuracy) : json(nullptr);
  s["best_eval_accuracy_step"] = best_accuracy ? json(best_accuracy->step) : json(nullptr);
  s["best_eval_loss"] = best_loss ? json(best_loss->eval_loss) : json(nullptr);
  s["best_eval_loss_step"] = best_loss ? json(best_loss->step) : json(nullptr);
  s["best_model"] = nullptr;
  if (h.best_model) {
    s["best_model"] = {{"step", h.best_model->step}, {"metric", h.best_model->metric}, {"value", h.best_model->value}};
  }
  s["early_stop_step"] = h.early_stop_step ? json(*h.early_stop_step) : json(nullptr);
  return s;
}

}  // namespace bagua::report
