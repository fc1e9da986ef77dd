// bagua bench's verdict and chart on constructed figures: summarize_bench()
// on workers' JSON built here (as run_bench_worker() writes it), so each
// case has exactly the step-time ranges it is about; bench_svg() on the
// result. The real runs are in bench_test.cpp.
#include <bagua/bench.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <regex>
#include <string>
#include <vector>

namespace bagua::testing {
namespace {

using json = nlohmann::json;

// One contender's figures, the same on both of its two ranks.
struct Figures {
  std::string name;
  double median, p10, p90;
  double loss = 1.0;
  bool diverged = false;
  double counted = 4e6;
};

// What run_bench_worker() returns for these contenders: 2 ranks, batch 32,
// samples/s from the median, "local" first (a 0.2 s step).
json raw_figures(const std::vector<Figures>& algorithms) {
  std::vector<Figures> all = {{"local", 0.2, 0.19, 0.21, 1.0, false, 0}};
  all.insert(all.end(), algorithms.begin(), algorithms.end());
  json raw = {{"world_size", 2}, {"nodes", 1},   {"model", "/home/someone/models/mlp.pt"}, {"batch_size", 32},
              {"steps", 10},     {"rounds", 3},  {"contenders", json::array()}};
  for (const auto& f : all) {
    json rank = {{"step_time_median_s", f.median},  {"step_time_p10_s", f.p10},   {"step_time_p90_s", f.p90},
                 {"samples_per_s", 32 / f.median},  {"counted_bytes_per_step", f.counted},
                 {"wire_bytes_sent_per_step", f.counted}, {"wire_bytes_received_per_step", f.counted},
                 {"first_loss", 2.3},               {"last_loss", f.loss},        {"diverged", f.diverged},
                 {"rounds_communicated", 3}};
    raw["contenders"].push_back({{"name", f.name}, {"kwargs", json::object()}, {"ranks", {rank, rank}}});
  }
  return raw;
}

json summarized(const std::vector<Figures>& algorithms) {
  return bagua::bench::summarize_bench(raw_figures(algorithms));
}

std::string recommendation(const json& report) { return report["recommendation"].get<std::string>(); }

// Issue 42: three algorithms whose p10-p90 ranges overlap; bytegrad's
// median is 1.13x faster, which was recommended as the winner.
TEST(BenchVerdict, OverlappingRangesAreWithinNoiseAndNameWhichOnes) {
  const json report = summarized({{"gradient_allreduce", 0.50, 0.45, 0.60},
                                  {"bytegrad", 0.4425, 0.40, 0.52},
                                  {"decentralized", 0.48, 0.43, 0.58}});
  json v = report.value("verdict", json::object());  // a copy: absent fields read as null
  EXPECT_EQ(v["kind"], "within_noise") << v.dump();
  EXPECT_TRUE(v["winner"].is_null()) << v.dump();
  EXPECT_EQ(v["within_noise"], json({"gradient_allreduce", "bytegrad", "decentralized"})) << v.dump();
  EXPECT_EQ(recommendation(report).rfind("within noise: gradient_allreduce, bytegrad, decentralized (their p10-p90 "
                                         "step times overlap): no clear winner here",
                                         0),
            0u)
      << recommendation(report);
  EXPECT_EQ(recommendation(report).find("1.13x"), std::string::npos) << recommendation(report);
  EXPECT_EQ(v["recommendation"], report["recommendation"]);
}

// Only those whose range meets the fastest's are within noise; a clearly
// slower one is not named.
TEST(BenchVerdict, WithinNoiseNamesOnlyThoseOverlappingTheFastest) {
  const json report = summarized({{"gradient_allreduce", 0.50, 0.47, 0.55},
                                  {"bytegrad", 0.30, 0.28, 0.33},
                                  {"qadam", 0.31, 0.29, 0.34}});
  json v = report.value("verdict", json::object());  // a copy: absent fields read as null
  EXPECT_EQ(v["kind"], "within_noise") << v.dump();
  EXPECT_EQ(v["within_noise"], json({"bytegrad", "qadam"})) << v.dump();
  EXPECT_EQ(recommendation(report).rfind("within noise: bytegrad, qadam (their p10-p90 step times overlap; the others "
                                         "are slower): no clear winner here",
                                         0),
            0u)
      << recommendation(report);
}

TEST(BenchVerdict, AWinnerOnlyWhenItsRangeIsClearOfEveryOther) {
  const json report = summarized({{"gradient_allreduce", 0.50, 0.45, 0.60},
                                  {"bytegrad", 0.30, 0.28, 0.34},
                                  {"decentralized", 0.48, 0.43, 0.58}});
  json v = report.value("verdict", json::object());  // a copy: absent fields read as null
  EXPECT_EQ(v["kind"], "clear") << v.dump();
  EXPECT_EQ(v["winner"], "bytegrad") << v.dump();
  EXPECT_TRUE(v["within_noise"].empty()) << v.dump();
  EXPECT_EQ(recommendation(report),
            "bytegrad: 1.67x the samples/s of gradient_allreduce here, loss no higher, its p10-p90 step time clear "
            "of the others'");

  // The baseline itself, clear of the others: the next one is named.
  const json base = summarized({{"gradient_allreduce", 0.30, 0.28, 0.34}, {"bytegrad", 0.50, 0.45, 0.60}});
  EXPECT_EQ(base.value("verdict", json::object()).value("winner", json()), "gradient_allreduce") << base.dump();
  EXPECT_EQ(recommendation(base),
            "gradient_allreduce: the fastest here of the algorithms that train as well, its p10-p90 step time clear "
            "of the others'; next: bytegrad at 0.60x its samples/s");
}

// One algorithm: nothing to compare, so nothing is "the fastest".
TEST(BenchVerdict, TheBaselineAloneIsNotCalledTheFastest) {
  const json report = summarized({{"gradient_allreduce", 0.50, 0.45, 0.60}});
  json v = report.value("verdict", json::object());
  EXPECT_EQ(v["kind"], "alone") << v.dump();
  EXPECT_TRUE(v["winner"].is_null());
  EXPECT_EQ(recommendation(report), "gradient_allreduce (the baseline): no other algorithm to compare it with");
  EXPECT_EQ(v["baseline"], "gradient_allreduce");
}

// An algorithm that trains worse is left out before ranges are compared:
// it neither wins nor joins the noise, and is said.
TEST(BenchVerdict, AnAlgorithmThatTrainsWorseIsLeftOutAndSaid) {
  Figures worse{"async", 0.20, 0.18, 0.22};
  worse.loss = 1.5;
  const json report = summarized({{"gradient_allreduce", 0.50, 0.45, 0.60}, worse, {"bytegrad", 0.49, 0.44, 0.59}});
  json v = report.value("verdict", json::object());  // a copy: absent fields read as null
  EXPECT_EQ(v["kind"], "within_noise") << v.dump();
  EXPECT_EQ(v["within_noise"], json({"gradient_allreduce", "bytegrad"})) << v.dump();
  EXPECT_EQ(v["not_considered"], json({{{"name", "async"}, {"reason", "trained worse"}}})) << v.dump();
  EXPECT_NE(recommendation(report).find("(not considered: async trained worse)"), std::string::npos)
      << recommendation(report);
}

// ---------------------------------------------------------------- the chart

// The value of attribute `name` in the element `tag`.
std::string attribute(const std::string& tag, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(tag, m, std::regex("\\s" + name + "=\"([^\"]*)\""))) return "";
  return m[1];
}

// Every element of `svg` with class="cls", as its opening tag (and text, for <text>).
std::vector<std::pair<std::string, std::string>> elements(const std::string& svg, const std::string& cls) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string needle = "class=\"" + cls + "\"";
  for (size_t p = svg.find(needle); p != std::string::npos; p = svg.find(needle, p + 1)) {
    const size_t open = svg.rfind('<', p), close = svg.find('>', p);
    const std::string tag = svg.substr(open, close - open + 1);
    std::string text;
    if (tag.rfind("<text", 0) == 0) text = svg.substr(close + 1, svg.find("</text>", close) - close - 1);
    out.emplace_back(tag, text);
  }
  return out;
}

double number(const std::string& tag, const std::string& name) { return std::stod(attribute(tag, name)); }

// Issue 42: the ideal marks crossed the figures, there was no time axis,
// and the title was the model's absolute path.
TEST(BenchSvg, TitledByTheRecipeWithATimeAxisAndNoMarkOnTheFigures) {
  // bytegrad faster than its ideal (overlap hid more than the bytes say):
  // its ideal mark lies beyond the end of its bar, where the figures began.
  json raw = raw_figures({{"gradient_allreduce", 0.50, 0.45, 0.60, 1.0, false, 4e6},
                          {"bytegrad", 0.26, 0.25, 0.28, 1.0, false, 2e6}});
  raw["recipe"] = "/home/someone/recipes/fashion-mnist-mlp.yaml";
  raw["recipe_name"] = "fashion-mnist-mlp";
  const json report = bagua::bench::summarize_bench(raw);
  ASSERT_GT(report["summary"][2]["ideal_step_s"].get<double>(), report["summary"][2]["step_time_p90_s"].get<double>())
      << "bytegrad faster than its ideal";
  const std::string chart = bagua::bench::bench_svg(report);

  const auto title = elements(chart, "title");
  ASSERT_EQ(title.size(), 1u) << chart;
  EXPECT_EQ(title[0].second, "fashion-mnist-mlp");
  EXPECT_EQ(chart.find("/home/someone"), std::string::npos) << chart;

  // The figures of each row start right of its bar, whisker and ideal mark.
  const auto values = elements(chart, "value"), bars = elements(chart, "communication");
  const auto ranges = elements(chart, "range"), ideals = elements(chart, "ideal");
  ASSERT_EQ(values.size(), 2u) << chart;
  ASSERT_EQ(bars.size(), 2u) << chart;
  ASSERT_EQ(ranges.size(), 2u) << chart;
  ASSERT_EQ(ideals.size(), 1u) << chart;  // gradient_allreduce is its own ideal
  for (size_t i = 0; i < values.size(); ++i) {
    const double text_x = number(values[i].first, "x");
    EXPECT_LT(number(bars[i].first, "x") + number(bars[i].first, "width"), text_x) << chart;
    EXPECT_LT(number(ranges[i].first, "data-x2"), text_x) << chart;
  }
  EXPECT_LT(number(ideals[0].first, "x1"), number(values[1].first, "x")) << chart;
  // The mark stays inside its row, above the next one and the axis.
  const double row_y = number(values[1].first, "y");
  EXPECT_GT(number(ideals[0].first, "y1"), number(values[0].first, "y")) << chart;
  EXPECT_LT(number(ideals[0].first, "y2"), row_y + 16) << chart;

  // A time axis under the bars: a line, round ticks from 0 in seconds, a label.
  const auto axis = elements(chart, "time-axis"), ticks = elements(chart, "tick");
  const auto label = elements(chart, "axis-label");
  ASSERT_EQ(axis.size(), 1u) << chart;
  ASSERT_GE(ticks.size(), 3u) << chart;
  ASSERT_EQ(label.size(), 1u) << chart;
  EXPECT_EQ(label[0].second, "step time (seconds)");
  EXPECT_EQ(ticks.front().second, "0.0");
  EXPECT_GT(number(axis[0].first, "y1"), number(ideals[0].first, "y2")) << chart;
  EXPECT_EQ(number(ticks.front().first, "x"), number(axis[0].first, "x1")) << chart;
  // The axis reaches past the longest thing drawn on it (gradient_allreduce's p90).
  EXPECT_GE(number(axis[0].first, "x2"), number(ranges[0].first, "data-x2")) << chart;
  // The ticks are labelled under the axis, and the figures start past its end.
  EXPECT_LT(number(axis[0].first, "x2"), number(values[0].first, "x")) << chart;
}

}  // namespace
}  // namespace bagua::testing
