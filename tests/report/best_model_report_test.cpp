// bagua report on checkpoint.keep_best's and train.early_stop's marks in
// metrics.jsonl: the kept evaluation is the last marked "best" (a resumed
// run's included), ringed on its figure's line; an early stop is the last
// evaluation's mark, drawn as a step marker.
#include <bagua/report.h>

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;

bagua::report::MetricsHistory history_of(const std::string& lines) {
  const fs::path path = fs::temp_directory_path() / ("bagua-best-report-" + std::to_string(getpid()) + ".jsonl");
  std::ofstream(path) << lines;
  auto h = bagua::report::read_metrics_history(path.string());
  fs::remove(path);
  return h;
}

TEST(BestModelReport, TheKeptEvaluationIsTheLastMarkedBestAndTheEarlyStopTheLastEvaluations) {
  const auto h = history_of(
      R"({"step": 4, "epoch": 1, "loss": 1.0, "samples_per_s": 10, "time": 1})" "\n"
      R"({"step": 4, "epoch": 1, "eval_loss": 0.9, "eval_accuracy": 0.6, "time": 1, "best": "eval_accuracy"})" "\n"
      R"({"step": 8, "epoch": 1, "eval_loss": 0.8, "eval_accuracy": 0.7, "time": 2, "best": "eval_accuracy"})" "\n"
      R"({"step": 8, "resumed_from": "x"})" "\n"
      R"({"step": 12, "epoch": 1, "eval_loss": 0.7, "eval_accuracy": 0.65, "time": 1, "early_stop": true})" "\n");
  ASSERT_TRUE(h.best_model);
  EXPECT_EQ(h.best_model->step, 8);
  EXPECT_EQ(h.best_model->metric, "eval_accuracy");
  EXPECT_DOUBLE_EQ(h.best_model->value, 0.7);
  EXPECT_EQ(h.early_stop_step, 12);
  const auto s = bagua::report::summarize_history(h);
  EXPECT_EQ(s["best_model"], (nlohmann::json{{"step", 8}, {"metric", "eval_accuracy"}, {"value", 0.7}}));
  EXPECT_EQ(s["early_stop_step"], 12);
  const std::string svg = bagua::report::report_svg(h, "t", "s");
  EXPECT_NE(svg.find("class=\"highlight\" data-series=\"eval_accuracy\""), std::string::npos) << svg;
  EXPECT_NE(svg.find(">early stop<"), std::string::npos) << svg;
}

TEST(BestModelReport, ARunWithoutThemHasNeither) {
  const auto h = history_of(
      R"({"step": 4, "epoch": 1, "eval_loss": 0.9, "time": 1, "early_stop": true})" "\n"
      R"({"step": 8, "epoch": 1, "eval_loss": 0.8, "time": 2})" "\n");
  EXPECT_FALSE(h.best_model);
  EXPECT_FALSE(h.early_stop_step) << "a run that went on after an early stop (made longer) did not stop there";
  const auto s = bagua::report::summarize_history(h);
  EXPECT_TRUE(s["best_model"].is_null());
  EXPECT_TRUE(s["early_stop_step"].is_null());
  EXPECT_EQ(bagua::report::report_svg(h, "t", "s").find("class=\"highlight\""), std::string::npos);
}

}  // namespace
