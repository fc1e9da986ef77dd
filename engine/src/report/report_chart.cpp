// bagua report's chart (bagua/report.h): the panels drawn by common's
// line charts.
#include <bagua/report.h>

#include "common/svg_chart.h"

#include <string>
#include <vector>

namespace bagua::report {
namespace {

std::vector<svg::ChartPanel> report_panels(const MetricsHistory& h) {
  svg::ChartSeries train_loss{"train_loss", "train loss", "#1f77b4", {}};
  svg::ChartSeries samples{"samples_per_s", "samples/s", "#2ca02c", {}};
  svg::ChartSeries grad_norm{"grad_norm", "gradient norm", "#9467bd", {}};
  for (const auto& p : h.steps) {
    train_loss.points.emplace_back(static_cast<double>(p.step), p.loss);
    samples.points.emplace_back(static_cast<double>(p.step), p.samples_per_s);
    if (p.grad_norm) grad_norm.points.emplace_back(static_cast<double>(p.step), *p.grad_norm);
  }
  svg::ChartSeries eval_loss{"eval_loss", "eval loss", "#ff7f0e", {}};
  svg::ChartSeries eval_accuracy{"eval_accuracy", "eval accuracy (%)", "#d62728", {}};
  for (const auto& e : h.evals) {
    eval_loss.points.emplace_back(static_cast<double>(e.step), e.eval_loss);
    if (e.eval_accuracy) eval_accuracy.points.emplace_back(static_cast<double>(e.step), 100.0 * *e.eval_accuracy);
  }
  // checkpoint.keep_best's kept evaluation, ringed on its figure's line.
  if (const auto& best = h.best_model) {
    const bool accuracy = best->metric == "eval_accuracy";
    (accuracy ? eval_accuracy : eval_loss)
        .highlights.push_back({static_cast<double>(best->step), accuracy ? 100.0 * best->value : best->value,
                               "best (kept)"});
  }
  svg::ChartPanel loss{"Loss", "loss", {train_loss}};
  if (!eval_loss.points.empty()) loss.series.push_back(eval_loss);
  svg::ChartPanel accuracy{"Eval accuracy", "accuracy (%)", {eval_accuracy},
                      "no eval accuracy (no data.eval, or not a classifier)"};
  svg::ChartPanel throughput{"Throughput (all workers)", "samples/s", {samples}};
  // Runs whose records carry grad_norm (every run since it was logged):
  // the norm before train.clip_grad_norm, where a spike shows.
  if (grad_norm.points.empty()) return {loss, accuracy, throughput};
  svg::ChartPanel norm{"Gradient norm (before clipping)", "L2 norm", {grad_norm}};
  return {loss, accuracy, norm, throughput};
}


}  // namespace

std::string report_svg(const MetricsHistory& h, const std::string& title, const std::string& subtitle) {
  std::vector<svg::ChartMarker> resumes;  // and an early stop
  for (size_t i = 0; i < h.resume_steps.size(); ++i) {
    resumes.push_back({static_cast<double>(h.resume_steps[i]), h.resume_labels.at(i)});
  }
  if (h.early_stop_step) resumes.push_back({static_cast<double>(*h.early_stop_step), "early stop"});
  return svg::line_chart_svg(title, subtitle, report_panels(h), resumes);
}

}  // namespace bagua::report
