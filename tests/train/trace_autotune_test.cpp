// `bagua run --trace` (output.trace) and `algorithm.bucket_size: auto`, end
// to end: the real binary, two workers, real Fashion-MNIST files.
#include "support/bagua_run.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

using namespace bagua::testing;
using nlohmann::json;

struct Span {
  std::string name;
  double begin, end;
  int tid;
  json args;
};

// Spans of one thread must nest: each lies inside the enclosing open one or
// after it ends. Returns the first violation, or "".
std::string nesting_violation(std::vector<Span> spans) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  });
  std::vector<Span> open;
  for (const auto& s : spans) {
    while (!open.empty() && open.back().end <= s.begin) open.pop_back();
    if (!open.empty() && s.end > open.back().end + 1e-3) {
      return "'" + s.name + "' [" + std::to_string(s.begin) + ", " + std::to_string(s.end) + "] overlaps '" +
             open.back().name + "' [" + std::to_string(open.back().begin) + ", " + std::to_string(open.back().end) +
             "]";
    }
    open.push_back(s);
  }
  return "";
}

TEST_F(RunTest, TraceHasEveryPhaseOneSpanPerBucketPerStepAndSpansNest) {
  std::string recipe = write_recipe("trace");
  // bucket_size 1: every tensor in a bucket of its own, so 4 buckets (2 layers).
  RunOutcome r = bagua_run(recipe + " --trace --set output.trace_from_step=3 --set output.trace_steps=4"
                                    " --set algorithm.bucket_size=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tracing steps 3-6"), std::string::npos) << r.output;
  for (int rank : {0, 1}) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    fs::path file = dir_ / "trace" / "trace" / ("rank-" + std::to_string(rank) + ".json");
    ASSERT_TRUE(fs::exists(file)) << file;
    json doc = json::parse(read_file(file));  // throws (fails the test) if not valid JSON
    ASSERT_TRUE(doc.contains("traceEvents") && doc["traceEvents"].is_array());
    std::map<int, std::string> thread_names;
    std::map<int, std::vector<Span>> by_thread;
    std::vector<Span> all;
    for (const auto& e : doc["traceEvents"]) {
      ASSERT_EQ(e.at("pid"), rank) << e;
      if (e.at("ph") == "M" && e.at("name") == "thread_name") thread_names[e.at("tid")] = e["args"]["name"];
      if (e.at("ph") != "X") continue;
      ASSERT_GE(e.at("dur").get<double>(), 0.0) << e;
      Span s{e.at("name"), e.at("ts"), e.at("ts").get<double>() + e.at("dur").get<double>(), e.at("tid"), e.at("args")};
      by_thread[s.tid].push_back(s);
      all.push_back(s);
    }
    for (const auto& [tid, spans] : by_thread) {
      EXPECT_EQ(nesting_violation(spans), "") << "thread " << thread_names[tid];
    }
    auto find_in = [&](const Span& outer, const std::string& name, int tid) {
      std::vector<Span> found;
      for (const auto& s : all) {
        if (s.name == name && s.tid == tid && s.begin >= outer.begin && s.end <= outer.end + 1e-3) found.push_back(s);
      }
      return found;
    };
    std::vector<Span> steps;
    for (const auto& s : all) {
      if (s.name.rfind("step ", 0) == 0) steps.push_back(s);
    }
    ASSERT_EQ(steps.size(), 4u) << "steps 3 to 6, and no other";
    std::set<std::string> step_names;
    for (const auto& s : steps) step_names.insert(s.name);
    EXPECT_EQ(step_names, (std::set<std::string>{"step 3", "step 4", "step 5", "step 6"}));
    for (const auto& step : steps) {
      SCOPED_TRACE(step.name);
      EXPECT_EQ(thread_names[step.tid], "training");
      for (const char* phase : {"control: stop vote", "data", "forward", "backward", "optimizer", "metrics"}) {
        EXPECT_EQ(find_in(step, phase, step.tid).size(), 1u) << phase;
      }
      // gradient_allreduce waits for its buckets at the end of backward.
      auto backward = find_in(step, "backward", step.tid);
      ASSERT_EQ(backward.size(), 1u);
      EXPECT_EQ(find_in(backward[0], "wait for communication", step.tid).size(), 1u);
      // One communication span per bucket, on the communication thread,
      // each with the bytes it sent.
      std::multiset<std::string> buckets;
      for (const auto& s : all) {
        if (s.name.rfind("communicate ", 0) != 0 || s.args.at("step") != step.args.at("step")) continue;
        buckets.insert(s.name);
        EXPECT_EQ(thread_names[s.tid], "communication");
        EXPECT_GT(s.args.at("bytes").get<int64_t>(), 0) << s.name;
        EXPECT_GE(s.args.at("queued_us").get<double>(), 0.0) << s.name;
        EXPECT_GE(s.begin, step.begin);
        EXPECT_LE(s.end, backward[0].end + 1e-3) << "communicated before backward's wait ended";
      }
      EXPECT_EQ(buckets, (std::multiset<std::string>{"communicate bucket0", "communicate bucket1",
                                                     "communicate bucket2", "communicate bucket3"}));
    }
  }
}

TEST_F(RunTest, AutoBucketSizeIsTunedLoggedKeptForResumeAndChangesNoResult) {
  std::string recipe = write_recipe("auto");
  RunOutcome tuned = bagua_run(recipe + " --set algorithm.bucket_size=auto --set output.dir=" +
                               (dir_ / "tuned").string());
  ASSERT_EQ(tuned.exit_code, 0) << tuned.output;
  EXPECT_NE(tuned.output.find("bucket_size auto: chose "), std::string::npos) << tuned.output;
  EXPECT_FALSE(fs::exists(dir_ / "tuned" / "trace")) << "no trace unless asked for";
  int64_t chosen = 0;
  for (const auto& j : metrics(dir_ / "tuned" / "metrics.jsonl")) {
    if (!j.contains("autotune")) continue;
    EXPECT_EQ(chosen, 0) << "one autotune record";
    chosen = j["autotune"]["bucket_bytes"];
    const auto& trials = j["autotune"]["trials"];
    ASSERT_GE(trials.size(), 2u) << j;
    bool listed = false;
    for (const auto& t : trials) {
      EXPECT_GT(t["step_s"].get<double>(), 0) << t;
      EXPECT_GE(t["buckets"].get<int64_t>(), 1) << t;
      listed = listed || t["bucket_bytes"] == chosen;
    }
    EXPECT_TRUE(listed) << "the choice is one of the sizes tried: " << j;
    EXPECT_LT(j["step"].get<int64_t>(), 24) << "tuned within the run's 24 steps";
  }
  ASSERT_GT(chosen, 0) << "metrics.jsonl has the autotune record";
  // Checkpoints keep the choice, so a resume builds the same buckets.
  json meta = json::parse(read_file(dir_ / "tuned" / "checkpoints" / "step-00000024" / "meta.json"));
  EXPECT_EQ(meta.value("tuned_bucket_bytes", int64_t{0}), chosen) << meta;
  // Two workers' sums do not depend on the buckets: the same weights as a
  // fixed size, bit for bit.
  RunOutcome fixed = bagua_run(recipe + " --set output.dir=" + (dir_ / "fixed").string());
  ASSERT_EQ(fixed.exit_code, 0) << fixed.output;
  EXPECT_EQ(max_abs_diff(model_parameters(dir_ / "tuned" / "model.pt"), model_parameters(dir_ / "fixed" / "model.pt")),
            0.0);
}

TEST_F(RunTest, AutoBucketSizeIsRefusedWhereBucketsHoldState) {
  std::string recipe = write_recipe("refused", "algorithm: {name: low_precision_decentralized, bucket_size: auto}\n");
  RunOutcome r = bagua_command("validate", recipe);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("algorithm.bucket_size"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("per-bucket state"), std::string::npos) << r.output;
  std::string ok = write_recipe("accepted", "algorithm: {name: bytegrad, bucket_size: auto}\n");
  RunOutcome v = bagua_command("validate", ok);
  EXPECT_EQ(v.exit_code, 0) << v.output;
}

}  // namespace
