#include "metrics_history.h"

#include <bagua/errors.h>

#include <cmath>
#include <fstream>

namespace bagua::cli {
namespace {

using json = nlohmann::json;

// A required number of a record; null (JSON's NaN) reads as NaN.
double number(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) throw Error(where + ": this record has no \"" + key + "\"", true);
  const json& v = j[key];
  if (v.is_null()) return NAN;
  if (!v.is_number()) throw Error(where + ": \"" + key + "\" is not a number", true);
  return v.get<double>();
}

int64_t step_of(const json& j, const std::string& where) {
  if (!j.contains("step") || !j["step"].is_number_integer()) {
    throw Error(where + ": this record has no integer \"step\"", true);
  }
  return j["step"].get<int64_t>();
}

}  // namespace

MetricsHistory read_metrics_history(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot be read", true);
  MetricsHistory h;
  double segment_time = 0;  // the last "time" of the run (or resume) being read
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    const std::string where = path + ":" + std::to_string(line_number);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw Error(where + ": not a JSON object", true);
    if (j.contains("resumed_from")) {
      h.resumes += 1;
      h.resume_steps.push_back(step_of(j, where));
      h.total_time += segment_time;
      segment_time = 0;
    } else if (j.contains("loss")) {
      h.steps.push_back({step_of(j, where), number(j, "loss", where), number(j, "samples_per_s", where),
                         number(j, "time", where)});
      segment_time = h.steps.back().time;
    } else if (j.contains("eval_loss")) {
      std::optional<double> accuracy;
      if (j.contains("eval_accuracy")) accuracy = number(j, "eval_accuracy", where);
      h.evals.push_back({step_of(j, where), number(j, "eval_loss", where), accuracy});
      segment_time = std::max(segment_time, number(j, "time", where));
    }
  }
  h.total_time += segment_time;
  return h;
}

json summarize_history(const MetricsHistory& h) {
  json s = {{"step_records", h.steps.size()}, {"evals", h.evals.size()}, {"resumes", h.resumes},
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
  return s;
}

}  // namespace bagua::cli
