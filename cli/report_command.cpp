// bagua report OUTPUT_DIR [--output FILE] [--json FILE|-]
//
// Reads a run's OUTPUT_DIR/metrics.jsonl and writes OUTPUT_DIR/report.svg
// (training and eval loss, eval accuracy and samples/s against the step)
// and prints a short summary: steps, time, resumes, final loss, best eval,
// throughput, the best model kept and an early stop (docs/metrics.md).
#include "command.h"

#include <bagua/errors.h>
#include <bagua/report.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

namespace bagua::cli {
namespace {

using report::MetricsHistory;

namespace fs = std::filesystem;
using json = nlohmann::json;

struct ReportFlags {
  std::string output_dir;
  std::string svg;   // default OUTPUT_DIR/report.svg
  std::string json;  // FILE, or "-" for stdout instead of the text
};

std::string fixed(double v, int decimals) {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

std::string seconds_text(double s) {
  if (s >= 3600) return fixed(s / 3600, 2) + " h";
  if (s >= 60) return fixed(s / 60, 1) + " min";
  return fixed(s, 1) + " s";
}

double value_or_nan(const json& j) { return j.is_number() ? j.get<double>() : NAN; }

void print_summary(std::ostream& out, const json& s, const std::string& svg_path, const std::string& best_model_path) {
  out << "steps        " << s["steps"].get<int64_t>() << " (" << s["step_records"].get<size_t>() << " records, "
      << s["evals"].get<size_t>() << " evaluations)\n";
  out << "time         " << seconds_text(s["total_time_s"].get<double>()) << " of training";
  const int resumes = s["resumes"].get<int>();
  if (resumes == 1) out << ", in 2 parts (resumed once)";
  if (resumes > 1) out << ", in " << resumes + 1 << " parts (resumed " << resumes << " times)";
  if (const int resizes = s.value("resizes", 0); resizes > 0) {
    out << ", " << resizes << " at another world size";
  }
  out << "\n";
  if (!s["final_step"].is_null()) {
    out << "final loss   " << fixed(value_or_nan(s["final_loss"]), 4) << " at step " << s["final_step"].get<int64_t>()
        << "\n";
    out << "samples/s    " << fixed(s["last_samples_per_s"].get<double>(), 0) << " last, "
        << fixed(s["mean_samples_per_s"].get<double>(), 0) << " mean over the records\n";
  }
  if (!s["best_eval_accuracy"].is_null()) {
    out << "best eval    accuracy " << fixed(100.0 * s["best_eval_accuracy"].get<double>(), 2) << "% at step "
        << s["best_eval_accuracy_step"].get<int64_t>() << "\n";
  } else if (!s["best_eval_loss"].is_null()) {
    out << "best eval    loss " << fixed(s["best_eval_loss"].get<double>(), 4) << " at step "
        << s["best_eval_loss_step"].get<int64_t>() << "\n";
  } else {
    out << "best eval    none (no evaluation recorded)\n";
  }
  if (const json& kept = s["best_model"]; kept.is_object()) {
    const std::string metric = kept["metric"].get<std::string>();
    const double value = kept["value"].get<double>();
    out << "best model   " << metric << " "
        << (metric == "eval_accuracy" ? fixed(100.0 * value, 2) + "%" : fixed(value, 4)) << " at step "
        << kept["step"].get<int64_t>() << ": " << best_model_path << "\n";
  }
  if (!s["early_stop_step"].is_null()) {
    out << "early stop   at step " << s["early_stop_step"].get<int64_t>() << " (train.early_stop)\n";
  }
  out << "chart        " << svg_path << "\n";
}

int run_report(const ReportFlags& f) {
  const fs::path dir = f.output_dir;
  if (!fs::is_directory(dir)) throw Error(f.output_dir + ": no such directory", true);
  const fs::path metrics = dir / "metrics.jsonl";
  if (!fs::exists(metrics)) {
    throw Error(metrics.string() + ": not found (is " + f.output_dir + " the output directory of a bagua run?)", true);
  }
  const MetricsHistory history = report::read_metrics_history(metrics.string());
  if (history.steps.empty() && history.evals.empty()) {
    throw Error(metrics.string() + ": no step or eval record yet", true);
  }
  json summary = report::summarize_history(history);
  const std::string svg_path = f.svg.empty() ? (dir / "report.svg").string() : f.svg;
  summary["svg"] = svg_path;

  std::string subtitle = std::to_string(summary["steps"].get<int64_t>()) + " steps, " +
                         seconds_text(history.total_time) + " of training";
  if (history.resumes == 1) subtitle += ", resumed once";
  if (history.resumes > 1) subtitle += ", resumed " + std::to_string(history.resumes) + " times";
  std::ofstream svg(svg_path);
  svg << report::report_svg(history, "bagua report: " + fs::absolute(dir).lexically_normal().filename().string(),
                            subtitle);
  svg.close();
  if (!svg) throw Error("cannot write " + svg_path, true);

  if (f.json == "-") {
    std::cout << summary.dump(2) << "\n";
    return kExitOk;
  }
  print_summary(std::cout, summary, svg_path, (dir / "best" / "model.pt").string());
  if (!f.json.empty()) {
    std::ofstream out(f.json);
    out << summary.dump(2) << "\n";
    out.close();
    if (!out) throw Error("cannot write " + f.json, true);
  }
  return kExitOk;
}

const CommandRegistration kReport{
    "report", "Chart and summarise a run from its metrics.jsonl: loss, eval accuracy, samples/s",
    [](CLI::App& sub) -> CommandRunner {
      auto f = std::make_shared<ReportFlags>();
      sub.add_option("output_dir", f->output_dir, "A run's output directory (output.dir, default runs/NAME)")
          ->required();
      sub.add_option("--output,-o", f->svg, "Write the SVG chart to FILE (default: OUTPUT_DIR/report.svg)")
          ->type_name("FILE");
      sub.add_option("--json", f->json, "Write the summary as JSON to FILE ('-': stdout, instead of the text)")
          ->type_name("FILE");
      sub.footer(
          "Reads OUTPUT_DIR/metrics.jsonl (written while the run goes on, so a running or crashed\n"
          "run can be reported too), draws the training and eval loss, the eval accuracy and the\n"
          "samples/s against the step, and prints the steps, the training time (resumes added up),\n"
          "the final loss, the best evaluation, the throughput, and the best model kept\n"
          "(checkpoint.keep_best) and an early stop (train.early_stop) when the run had them.\n"
          "docs/metrics.md explains each figure.\n\n"
          "Exit status: 0 done, 2 no such directory, no metrics.jsonl or a malformed line (named\n"
          "FILE:LINE), 1 internal failure.\n\n"
          "Examples:\n"
          "  bagua report runs/quickstart\n"
          "  bagua report runs/quickstart --output quickstart.svg --json -\n");
      return [f]() -> int { return run_report(*f); };
    }};

}  // namespace
}  // namespace bagua::cli
