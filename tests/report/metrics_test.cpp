// Metrics where users look: TensorBoard event files (output.tensorboard)
// read back by an independent Python reader (read_tfevents.py: TFRecord
// framing and CRC32C by hand, Event protos through Debian's python3-protobuf)
// and compared with metrics.jsonl, and `bagua report` on a real run's output.
#include "support/python.h"
#include "support/bagua_run.h"

#include <bagua/errors.h>
#include <bagua/metrics.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace bagua::testing;
using nlohmann::json;

// TensorBoard stores scalars as 32-bit floats.
double as_float32(double v) { return static_cast<double>(static_cast<float>(v)); }

// Every event file in `dir` as read_tfevents.py decodes them.
json read_events(const fs::path& dir) {
  const fs::path out = dir.parent_path() / "events.json";
  const std::string cmd = test_python() + " " + kSource + "/tests/fixtures/read_tfevents.py " + dir.string() + " > " +
                          out.string() + " 2> " + out.string() + ".err";
  const int status = std::system(cmd.c_str());
  EXPECT_EQ(status, 0) << read_file(out.string() + ".err");
  if (status != 0) return json::object({{"files", json::array()}});
  return json::parse(read_file(out));
}

// The scalar events of every file, in file order, after checking each
// file opens with the file-version event.
std::vector<json> scalar_events(const json& files) {
  std::vector<json> events;
  for (const auto& f : files["files"]) {
    const auto& e = f["events"];
    EXPECT_FALSE(e.empty()) << f["name"];
    if (e.empty()) continue;
    EXPECT_EQ(e[0].value("file_version", std::string()), "brain.Event:2") << f["name"];
    EXPECT_GT(e[0]["wall_time"].get<double>(), 1.6e9) << "wall_time is Unix seconds";
    for (size_t i = 1; i < e.size(); ++i) {
      EXPECT_TRUE(e[i].contains("scalars")) << e[i];
      EXPECT_GE(e[i]["wall_time"].get<double>(), e[i - 1]["wall_time"].get<double>());
      events.push_back(e[i]);
    }
  }
  return events;
}

// Each step and eval record of metrics.jsonl has its event, in the same
// order, with the same step and values.
void expect_events_match_metrics(const std::vector<json>& events, const std::vector<json>& records) {
  std::vector<json> logged;
  for (const auto& r : records) {
    if (r.contains("loss") || r.contains("eval_loss")) logged.push_back(r);
  }
  ASSERT_EQ(events.size(), logged.size());
  for (size_t i = 0; i < logged.size(); ++i) {
    const json& r = logged[i];
    const json& e = events[i];
    EXPECT_EQ(e["step"], r["step"]) << i;
    const json& s = e["scalars"];
    std::vector<std::pair<std::string, std::string>> pairs;  // tag, metrics.jsonl key
    if (r.contains("loss")) {
      pairs = {{"train/loss", "loss"}, {"train/lr", "lr"}, {"train/samples_per_s", "samples_per_s"},
               {"comm/bytes", "comm_bytes"}};
      if (r.contains("lrs")) {
        for (size_t k = 0; k < r["lrs"].size(); ++k) {
          ASSERT_TRUE(s.contains("train/lr/" + std::to_string(k))) << s;
          EXPECT_EQ(s["train/lr/" + std::to_string(k)].get<double>(), as_float32(r["lrs"][k].get<double>()));
        }
      }
    } else {
      pairs = {{"eval/loss", "eval_loss"}, {"eval/accuracy", "eval_accuracy"}};
    }
    for (const auto& [tag, key] : pairs) {
      ASSERT_TRUE(s.contains(tag)) << tag << " missing at step " << r["step"] << ": " << s;
      EXPECT_EQ(s[tag].get<double>(), as_float32(r[key].get<double>())) << tag << " at step " << r["step"];
    }
  }
}

// The event files hold what metrics.jsonl holds.
void check_tensorboard(const fs::path& out) {
  ASSERT_TRUE(fs::is_directory(out / "tensorboard")) << "output.tensorboard: true writes OUTPUT/tensorboard/";
  const json files = read_events(out / "tensorboard");
  ASSERT_EQ(files["files"].size(), 1u) << files.dump();
  EXPECT_TRUE(contains(files["files"][0]["name"], "events.out.tfevents.")) << files.dump();
  const auto records = metrics(out / "metrics.jsonl");
  // Every line a run writes is a record of bagua/metrics.h.
  EXPECT_EQ(bagua::metrics::read_metrics_file((out / "metrics.jsonl").string()).size(), records.size());
  int evals = 0, with_lrs = 0;
  for (const auto& r : records) {
    evals += r.contains("eval_accuracy");
    with_lrs += r.contains("lrs") && r["lrs"].size() == 2;
  }
  EXPECT_EQ(evals, 3) << "eval_every: 8 over 24 steps";
  EXPECT_EQ(with_lrs, 6) << "two optimizers: each step record lists both lrs";
  expect_events_match_metrics(scalar_events(files), records);
}

// `bagua report` draws one curve per series and summarises metrics.jsonl.
void check_report(const fs::path& work, const fs::path& out) {
  RunOutcome r = bagua_command("report", out.string() + " --json " + (work / "summary.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(out / "report.svg"));
  const json summary = json::parse(read_file(work / "summary.json"));

  // The SVG is well-formed XML with one polyline per curve, each with one
  // point per record (checked by Python's XML parser, not by this code).
  const std::string check =
      test_python() + " -c \"import sys, xml.etree.ElementTree as ET\n"
      "root = ET.parse(sys.argv[1]).getroot()\n"
      "for p in root.iter('{http://www.w3.org/2000/svg}polyline'):\n"
      "    print(p.get('data-series'), len(p.get('points').split()))\" " +
      (out / "report.svg").string() + " > " + (work / "polylines.txt").string() + " 2>&1";
  ASSERT_EQ(std::system(check.c_str()), 0) << read_file(work / "polylines.txt");
  std::map<std::string, int> polylines;
  std::istringstream lines(read_file(work / "polylines.txt"));
  for (std::string name; lines >> name;) lines >> polylines[name];

  const auto records = metrics(out / "metrics.jsonl");
  int steps = 0, evals = 0, norms = 0;
  double final_loss = NAN, best_accuracy = -1, last_rate = NAN, rate_sum = 0, last_time = 0;
  int64_t final_step = 0, best_step = -1;
  for (const auto& j : records) {
    if (j.contains("loss")) {
      ++steps;
      norms += j.contains("grad_norm") && j["grad_norm"].is_number();
      final_loss = j["loss"];
      final_step = j["step"];
      last_rate = j["samples_per_s"];
      rate_sum += last_rate;
      last_time = j["time"];
    }
    if (j.contains("eval_accuracy")) {
      ++evals;
      if (j["eval_accuracy"].get<double>() > best_accuracy) {
        best_accuracy = j["eval_accuracy"];
        best_step = j["step"];
      }
      last_time = std::max(last_time, j["time"].get<double>());
    }
  }
  ASSERT_GT(steps, 0);
  ASSERT_GT(evals, 0);
  ASSERT_GT(norms, 0) << "every step record carries grad_norm";
  EXPECT_EQ(polylines.size(), 5u) << read_file(work / "polylines.txt");
  EXPECT_EQ(polylines["grad_norm"], norms);
  EXPECT_EQ(polylines["train_loss"], steps);
  EXPECT_EQ(polylines["samples_per_s"], steps);
  EXPECT_EQ(polylines["eval_loss"], evals);
  EXPECT_EQ(polylines["eval_accuracy"], evals);

  EXPECT_EQ(summary["step_records"], steps);
  EXPECT_EQ(summary["evals"], evals);
  EXPECT_EQ(summary["resumes"], 0);
  EXPECT_EQ(summary["final_step"], final_step);
  EXPECT_EQ(summary["final_loss"].get<double>(), final_loss);
  EXPECT_EQ(summary["best_eval_accuracy"].get<double>(), best_accuracy);
  EXPECT_EQ(summary["best_eval_accuracy_step"], best_step);
  EXPECT_EQ(summary["last_samples_per_s"].get<double>(), last_rate);
  EXPECT_DOUBLE_EQ(summary["mean_samples_per_s"].get<double>(), rate_sum / steps);
  EXPECT_EQ(summary["total_time_s"].get<double>(), last_time);
  // The text summary says the same.
  char best[32];
  std::snprintf(best, sizeof(best), "%.2f%% at step %lld", 100 * best_accuracy, static_cast<long long>(best_step));
  EXPECT_TRUE(contains(r.output, best)) << r.output;
  EXPECT_TRUE(contains(r.output, (out / "report.svg").string())) << r.output;
}

// One real run (2 workers, two optimizers, a cosine schedule, evaluation
// every 8 steps, TensorBoard on), then its event files and its report. One
// test, so that ctest (a process per test) trains once.
TEST_F(RunTest, TensorBoardFilesAndTheReportOfARunMatchItsMetricsJsonl) {
  const fs::path recipe = dir_ / "tb.yaml";
  std::ofstream(recipe) << "name: tb\n"
                        << "model: {torchscript: " << kSource << "/tests/fixtures/models/mlp_small.pt, loss: cross_entropy}\n"
                        << "data:\n"
                        << "  train: {format: idx, images: " << kFmnist << "train-images-idx3-ubyte.gz, labels: "
                        << kFmnist << "train-labels-idx1-ubyte.gz}\n"
                        << "  eval: {format: idx, images: " << kFmnist << "t10k-images-idx3-ubyte.gz, labels: "
                        << kFmnist << "t10k-labels-idx1-ubyte.gz}\n"
                        << "  batch_size: 16\n"
                        << "optimizers:\n"
                        << "  - {type: sgd, lr: 0.05, momentum: 0.9, params: ['*.weight']}\n"
                        << "  - {type: sgd, lr: 0.02}\n"
                        << "scheduler: {type: cosine}\n"
                        << "distributed: {nproc_per_node: 2}\n"
                        << "train: {epochs: 1, max_steps: 24, log_every_steps: 4, eval_every: 8}\n"
                        << "output: {dir: " << (dir_ / "tb").string() << ", tensorboard: true}\n";
  RunOutcome run = bagua_run(recipe.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  {
    SCOPED_TRACE("TensorBoard event files");
    check_tensorboard(dir_ / "tb");
  }
  {
    SCOPED_TRACE("bagua report");
    check_report(dir_, dir_ / "tb");
  }
}

TEST_F(RunTest, AResumedRunAddsAnEventFileAndTheReportCountsTheResume) {
  const std::string recipe = write_recipe("resumed");
  const std::string tb = " --set output.tensorboard=true --nproc-per-node 1";  // one worker: quicker
  RunOutcome first = bagua_run(recipe + tb + " --set train.max_steps=8");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  RunOutcome second = bagua_run(recipe + tb + " --set train.max_steps=16");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  ASSERT_TRUE(contains(second.output, "resumed from")) << second.output;

  const fs::path out = dir_ / "resumed";
  const json files = read_events(out / "tensorboard");
  ASSERT_EQ(files["files"].size(), 2u) << "one event file per start of the run: " << files.dump();
  const auto records = metrics(out / "metrics.jsonl");
  expect_events_match_metrics(scalar_events(files), records);

  RunOutcome report = bagua_command("report", out.string() + " --json -");
  ASSERT_EQ(report.exit_code, 0) << report.output;
  const json summary = json::parse(report.output);
  EXPECT_EQ(summary["resumes"], 1);
  const std::string svg = read_file(out / "report.svg");
  size_t markers = 0;
  for (size_t at = svg.find("class=\"x-marker\""); at != std::string::npos; at = svg.find("class=\"x-marker\"", at + 1)) {
    ++markers;
  }
  EXPECT_EQ(markers, 4u) << "the resume marked in each of the four panels (loss, accuracy, gradient norm, samples/s)";
  double total = 0, segment = 0;
  for (const auto& j : records) {
    if (j.contains("resumed_from")) total += std::exchange(segment, 0.0);
    if (j.contains("loss")) segment = j["time"];
  }
  EXPECT_DOUBLE_EQ(summary["total_time_s"].get<double>(), total + segment) << "each part's time, added up";
}

TEST_F(RunTest, ReportNamesWhatIsWrong) {
  RunOutcome missing = bagua_command("report", (dir_ / "nowhere").string());
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_TRUE(contains(missing.output, (dir_ / "nowhere").string() + ": no such directory")) << missing.output;

  RunOutcome empty = bagua_command("report", dir_.string());
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
  EXPECT_TRUE(contains(empty.output, (dir_ / "metrics.jsonl").string() + ": not found")) << empty.output;

  std::ofstream(dir_ / "metrics.jsonl") << "{\"step\": 4, \"epoch\": 1, \"loss\": 2.1, \"lr\": 0.1, "
                                           "\"samples_per_s\": 100, \"time\": 1, \"comm_bytes\": 0}\n"
                                        << "{\"step\": 8, \"loss\": \n";
  RunOutcome malformed = bagua_command("report", dir_.string());
  EXPECT_EQ(malformed.exit_code, 2) << malformed.output;
  EXPECT_TRUE(contains(malformed.output, (dir_ / "metrics.jsonl").string() + ":2: not a JSON object"))
      << malformed.output;
  EXPECT_FALSE(fs::exists(dir_ / "report.svg")) << "no chart from a file that could not be read";
}

}  // namespace
