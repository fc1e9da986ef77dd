// The metrics.jsonl format in one place (bagua/metrics.h): every record kind
// survives its JSON both ways, the reader names what is wrong with a line,
// and the TensorBoard tags come from the same records.
#include <bagua/errors.h>
#include <bagua/metrics.h>

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <variant>

namespace {

using namespace bagua::metrics;

template <typename T>
T round_trip(const T& record) {
  const auto j = to_json(record);
  const auto back = record_from_json(nlohmann::json::parse(j.dump()), "test");
  EXPECT_TRUE(back.has_value()) << j.dump();
  EXPECT_TRUE(std::holds_alternative<T>(*back)) << j.dump();
  return std::get<T>(*back);
}

TEST(MetricsRecords, EveryKindRoundTrips) {
  StepRecord s;
  s.step = 50;
  s.epoch = 2;
  s.loss = 0.25;
  s.lr = 0.1;
  s.samples_per_s = 1234.5;
  s.time = 3.5;
  s.comm_bytes = 4096;
  s.nonfinite_skips = 1;
  s.padding = 0.125;
  s.lrs = {0.1, 0.01};
  s.diverging = true;
  const StepRecord s2 = round_trip(s);
  EXPECT_TRUE(s2.diverging);
  EXPECT_FALSE(round_trip(StepRecord{}).diverging);
  EXPECT_EQ(s2.step, 50);
  EXPECT_EQ(s2.epoch, 2);
  EXPECT_DOUBLE_EQ(s2.loss, 0.25);
  EXPECT_DOUBLE_EQ(s2.samples_per_s, 1234.5);
  EXPECT_EQ(s2.comm_bytes, 4096);
  EXPECT_EQ(s2.nonfinite_skips, 1);
  EXPECT_EQ(s2.padding, 0.125);
  EXPECT_EQ(s2.lrs, s.lrs);

  EvalRecord e{60, 2, 0.5, 0.875, 10000, 4.0, std::nullopt, "", false};
  const EvalRecord e2 = round_trip(e);
  EXPECT_EQ(e2.eval_accuracy, 0.875);
  EXPECT_EQ(e2.eval_samples, 10000);
  EXPECT_TRUE(e2.best.empty());
  EXPECT_FALSE(e2.early_stop);
  EXPECT_FALSE(to_json(e).contains("best"));
  EXPECT_FALSE(to_json(e).contains("early_stop"));
  e.best = "eval_accuracy";
  e.early_stop = true;
  const EvalRecord e3 = round_trip(e);
  EXPECT_EQ(e3.best, "eval_accuracy");
  EXPECT_TRUE(e3.early_stop);
  EXPECT_EQ(eval_figure(e3, "eval_accuracy"), 0.875);
  EXPECT_EQ(eval_figure(e3, "eval_loss"), 0.5);
  EXPECT_FALSE(eval_figure(e3, "eval_perplexity"));

  const ResumeRecord r2 = round_trip(ResumeRecord{100, "/runs/x/checkpoints/step-00000100"});
  EXPECT_EQ(r2.step, 100);
  EXPECT_EQ(r2.resumed_from, "/runs/x/checkpoints/step-00000100");
  EXPECT_EQ(r2.previous_world_size, 0) << "a resume at the same size has no \"resized\"";
  EXPECT_FALSE(to_json(ResumeRecord{100, "x"}).contains("resized"));
  EXPECT_FALSE(to_json(ResumeRecord{100, "x"}).contains("redone_steps"));

  ResumeRecord resized{14, "/runs/x/checkpoints/step-00000014"};
  resized.previous_world_size = 4;
  resized.world_size = 1;
  resized.previous_global_batch = 64;
  resized.global_batch = 16;
  resized.epoch = 1;
  resized.epoch_position = 576;
  resized.redone_steps = 1;
  resized.redone_samples = 64;
  resized.restart = 2;
  resized.nodes = 1;
  const ResumeRecord z = round_trip(resized);
  EXPECT_EQ(z.redone_steps, 1);
  EXPECT_EQ(z.redone_samples, 64);
  EXPECT_EQ(z.restart, 2);
  EXPECT_EQ(z.nodes, 1);
  EXPECT_EQ(z.previous_world_size, 4);
  EXPECT_EQ(z.world_size, 1);
  EXPECT_EQ(z.previous_global_batch, 64);
  EXPECT_EQ(z.global_batch, 16);
  EXPECT_EQ(z.epoch, 1);
  EXPECT_EQ(z.epoch_position, 576);
  nlohmann::json bad = to_json(resized);
  bad["resized"]["world_size"] = 4;
  EXPECT_THROW(record_from_json(bad, "metrics.jsonl:3"), bagua::Error);

  AutotuneRecord a;
  a.step = 18;
  a.bucket_bytes = 1 << 20;
  a.trials = {{1 << 20, 2, 0.01}, {1 << 22, 1, 0.02}};
  const AutotuneRecord a2 = round_trip(a);
  ASSERT_EQ(a2.trials.size(), 2u);
  EXPECT_EQ(a2.trials[1].buckets, 1);
  EXPECT_DOUBLE_EQ(a2.trials[0].step_s, 0.01);

  const MemoryRecord m2 = round_trip(MemoryRecord{200, {1000, 2000}});
  EXPECT_EQ(m2.peak_rss_bytes, (std::vector<int64_t>{1000, 2000}));
}

TEST(MetricsRecords, ADivergedLossIsNullAndReadsAsNaN) {
  StepRecord s;
  s.loss = std::nan("");
  const auto j = to_json(s);
  EXPECT_TRUE(j["loss"].is_null()) << j.dump();
  EXPECT_TRUE(std::isnan(round_trip(s).loss));
}

TEST(MetricsRecords, TheReaderNamesTheLineAndTheField) {
  const auto path = std::filesystem::temp_directory_path() / ("bagua-metrics-" + std::to_string(getpid()) + ".jsonl");
  {
    std::ofstream out(path);
    out << to_json(StepRecord{}).dump() << "\n\n" << R"({"kind_of_the_future": 1})" << "\n"
        << R"({"step": 3, "loss": 1.0, "time": 2.0})" << "\n";
  }
  try {
    read_metrics_file(path.string());
    FAIL() << "a step record without samples_per_s was accepted";
  } catch (const bagua::Error& e) {
    EXPECT_EQ(std::string(e.what()), path.string() + ":4: this record has no \"samples_per_s\"");
    EXPECT_TRUE(e.is_user_error());
  }
  {
    std::ofstream out(path);
    out << to_json(EvalRecord{}).dump() << "\n" << R"({"kind_of_the_future": 1})" << "\n";
  }
  EXPECT_EQ(read_metrics_file(path.string()).size(), 1u) << "unknown kinds are skipped, not errors";
  std::filesystem::remove(path);
  EXPECT_THROW(read_metrics_file(path.string()), bagua::Error);
}

TEST(MetricsRecords, TensorBoardTagsComeFromTheRecords) {
  StepRecord s;
  s.lrs = {0.1, 0.2};
  s.nonfinite_skips = 0;
  const auto tags = tensorboard_scalars(s);
  std::vector<std::string> names;
  for (const auto& [tag, value] : tags) names.push_back(tag);
  EXPECT_EQ(names, (std::vector<std::string>{"train/loss", "train/lr", "train/samples_per_s", "comm/bytes",
                                             "train/lr/0", "train/lr/1", "train/nonfinite_skips"}));
  EXPECT_EQ(tensorboard_scalars(EvalRecord{1, 1, 0.5, 0.9, 10, 1, std::nullopt, "", false}).size(), 2u);
  EXPECT_TRUE(tensorboard_scalars(MemoryRecord{}).empty());
}

}  // namespace
