// `bagua report`: a run's metrics.jsonl read back (the fields are
// docs/run.md's): the step and eval records in file order, the resumes,
// the run's summary as `bagua report` prints it (docs/metrics.md defines
// each figure), and its chart. No LibTorch (libbagua_common).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bagua::report {

struct StepPoint {
  int64_t step;
  double loss;  // NaN when the record holds null (a diverged loss)
  double samples_per_s;
  double time;  // seconds since that run (or resume) started
  std::optional<double> grad_norm = std::nullopt;  // the gradients' norm before clipping, when recorded
};

struct EvalPoint {
  int64_t step;
  double eval_loss;
  std::optional<double> eval_accuracy;
};

struct MetricsHistory {
  std::vector<StepPoint> steps;  // records with "loss", in file order
  std::vector<EvalPoint> evals;  // records with "eval_loss", in file order
  int resumes = 0;               // records with "resumed_from"
  std::vector<int64_t> resume_steps;  // the step of each, in file order
  // What each did: "resumed", or "2 -> 4 workers" for a resume at another size.
  std::vector<std::string> resume_labels;
  int resizes = 0;  // resumes at another world size or global batch
  double total_time = 0;         // the sum over the run and each resume of its last "time"
  // The evaluation whose model checkpoint.keep_best kept last (in
  // OUTPUT/best/): the last record with "best", its figure and value.
  struct KeptBest {
    int64_t step = 0;
    std::string metric;  // "eval_loss", "eval_accuracy"
    double value = 0;
  };
  std::optional<KeptBest> best_model;
  std::optional<int64_t> early_stop_step;  // the last evaluation ended the run (train.early_stop)
};

// Reads PATH. Throws bagua::Error (a user error) naming PATH:LINE for a line
// that is not a JSON object or a step/eval record missing a field, and
// naming PATH when it cannot be read.
MetricsHistory read_metrics_history(const std::string& path);

// The summary as JSON: steps, step_records, evals, resumes, total_time_s,
// final_step, final_loss, best_eval_accuracy(+_step), best_eval_loss(+_step),
// last_samples_per_s, mean_samples_per_s, best_model ({step, metric, value}:
// checkpoint.keep_best's), early_stop_step; figures that do not exist are null.
nlohmann::json summarize_history(const MetricsHistory& h);

// The chart as a standalone SVG: the training and eval loss, the eval
// accuracy and the samples/s against the step, one panel each, with a
// dashed mark at each resume (labelled as resume_labels says) and at an
// early stop, and the kept best evaluation ringed on its figure's line.
std::string report_svg(const MetricsHistory& h, const std::string& title, const std::string& subtitle);

}  // namespace bagua::report
