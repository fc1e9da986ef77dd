// checkpoint.keep_best and train.early_stop: the judging alone
// (train/best_model.h, train/early_stop.h), then real runs of `bagua run`
// that keep the best model, stop early, and go on from a checkpoint with the
// best so far.
#include "support/bagua_run.h"

#include <bagua/errors.h>

#include "train/best_model.h"
#include "train/checkpoint_files.h"
#include "train/early_stop.h"

#include <gtest/gtest.h>
#include <torch/serialize.h>

#include <cmath>
#include <cstdio>
#include <limits>

namespace {

using namespace bagua::testing;
using bagua::BestEvaluation;
using bagua::EvalGoal;
using bagua::EvalMetric;
using bagua::MetricMode;
using bagua::metrics::EvalRecord;
using nlohmann::json;

EvalRecord eval_at(int64_t step, double loss, std::optional<double> accuracy = std::nullopt) {
  EvalRecord r;
  r.step = step;
  r.epoch = 1;
  r.eval_loss = loss;
  r.eval_accuracy = accuracy;
  return r;
}

TEST(BestEvaluation, ImprovesTowardItsModeAndNaNNever) {
  BestEvaluation best{EvalGoal{EvalMetric::kEvalLoss, MetricMode::kMin}};
  EXPECT_TRUE(bagua::train::judge(best, eval_at(2, 0.9)));
  EXPECT_FALSE(bagua::train::judge(best, eval_at(4, 0.9))) << "equal is no improvement";
  EXPECT_FALSE(bagua::train::judge(best, eval_at(6, NAN)));
  EXPECT_EQ(best.evaluations_since, 2);
  EXPECT_TRUE(bagua::train::judge(best, eval_at(8, 0.5)));
  EXPECT_EQ(best.step, 8);
  EXPECT_DOUBLE_EQ(best.value, 0.5);
  EXPECT_EQ(best.evaluations_since, 0);

  BestEvaluation accuracy{EvalGoal{EvalMetric::kEvalAccuracy, MetricMode::kMax}};
  EXPECT_FALSE(bagua::train::judge(accuracy, eval_at(2, 0.5))) << "a record without the figure";
  EXPECT_TRUE(bagua::train::judge(accuracy, eval_at(4, 0.5, 0.7)));
  EXPECT_FALSE(bagua::train::judge(accuracy, eval_at(6, 0.4, 0.71), 0.05)) << "within min_delta";
  EXPECT_TRUE(bagua::train::judge(accuracy, eval_at(8, 0.4, 0.8), 0.05));
}

// A figure the run's evaluations never report (eval_perplexity of a model
// that is not a sequence model) stops the run at the first, naming the key.
TEST(BestEvaluation, AFigureTheEvaluationsDoNotReportIsAUserError) {
  const EvalGoal perplexity{EvalMetric::kEvalPerplexity, MetricMode::kMin};
  try {
    bagua::train::require_figure(perplexity, eval_at(2, 0.9, 0.5), "train.early_stop");
    ADD_FAILURE() << "accepted a record without eval_perplexity";
  } catch (const bagua::Error& e) {
    EXPECT_TRUE(e.is_user_error());
    EXPECT_NE(std::string(e.what()).find("train.early_stop watches eval_perplexity, which this run's evaluations "
                                         "do not report"),
              std::string::npos)
        << e.what();
  }
  EvalRecord tokens = eval_at(2, 2.0);
  tokens.eval_perplexity = std::exp(2.0);
  EXPECT_NO_THROW(bagua::train::require_figure(perplexity, tokens, "train.early_stop"));
  BestEvaluation best{perplexity};
  EXPECT_TRUE(bagua::train::judge(best, tokens));
  EXPECT_DOUBLE_EQ(best.value, std::exp(2.0));
  EXPECT_EQ(bagua::train::figure_text(EvalMetric::kEvalPerplexity, best.value), "7.39");
}

TEST(BestEvaluation, AResumeKeepsTheStateOfTheSameGoalOnly) {
  BestEvaluation saved{EvalGoal{EvalMetric::kEvalLoss, MetricMode::kMin}, 0.3, 40, 2, 1};
  const BestEvaluation same = bagua::train::resumed_best(saved, saved.goal);
  EXPECT_EQ(same.step, 40);
  EXPECT_EQ(same.evaluations_since, 1);
  const BestEvaluation other = bagua::train::resumed_best(saved, {EvalMetric::kEvalLoss, MetricMode::kMax});
  EXPECT_TRUE(std::isnan(other.value));
  EXPECT_EQ(other.goal.mode, MetricMode::kMax);
  EXPECT_TRUE(std::isnan(bagua::train::resumed_best(std::nullopt, saved.goal).value));
}

TEST(EarlyStop, EndsAfterPatienceEvaluationsWithoutAnImprovementAndSaysWhy) {
  bagua::EarlyStopSpec spec;
  spec.patience = 2;
  bagua::train::EarlyStop stop(spec);
  EXPECT_FALSE(stop.after_evaluation(eval_at(10, 0.5)));
  EXPECT_FALSE(stop.after_evaluation(eval_at(20, 0.4)));
  EXPECT_FALSE(stop.after_evaluation(eval_at(30, 0.45)));
  const auto why = stop.after_evaluation(eval_at(40, 0.41));
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, "eval_loss has not improved for 2 evaluations (best 0.4000 at step 20)");

  // Resumed from a checkpoint that had counted one: one more ends it.
  bagua::train::EarlyStop resumed(spec);
  resumed.resume_from(BestEvaluation{spec.goal, 0.4, 20, 1, 1});
  EXPECT_TRUE(resumed.after_evaluation(eval_at(40, 0.41)));
}

// The parameters of a checkpoint's model.pt (an archive by name), in the
// order of `model_pt`'s (a TorchScript file).
std::vector<at::Tensor> checkpoint_parameters(const fs::path& checkpoint, const fs::path& model_pt) {
  torch::serialize::InputArchive archive;
  archive.load_from((checkpoint / "model.pt").string());
  std::vector<at::Tensor> out;
  for (const auto& p : torch::jit::load(model_pt.string()).named_parameters()) {
    at::Tensor t;
    archive.read(p.name, t);
    out.push_back(t);
  }
  return out;
}

std::vector<json> eval_records(const fs::path& out) {
  std::vector<json> evals;
  for (const auto& j : metrics(out / "metrics.jsonl")) {
    if (j.contains("eval_loss")) evals.push_back(j);
  }
  return evals;
}

// A run that evaluates and checkpoints every 4 steps (every checkpoint
// kept), with `extra` recipe keys under train and checkpoint.
class KeepBestRun : public RunTest {
 protected:
  std::string recipe(const std::string& name, const std::string& train, const std::string& checkpoint) {
    out_ = dir_ / name;
    return write_recipe(name) + " --set 'data.eval={format: idx, images: " + kFmnist +
           "t10k-images-idx3-ubyte.gz, labels: " + kFmnist + "t10k-labels-idx1-ubyte.gz}'" +
           " --set train.eval_every=4 --set checkpoint.every_steps=4 --set checkpoint.keep=10" +
           (train.empty() ? "" : " --set 'train.early_stop=" + train + "'") +
           (checkpoint.empty() ? "" : " --set 'checkpoint.keep_best=" + checkpoint + "'");
  }
  json best_eval() { return json::parse(read_file(out_ / "best" / "eval.json")); }

  fs::path out_;
};

// Lower is better: the evaluations marked "best" are the running minima,
// across the resume, and best/ holds the last of them: its weights are the
// checkpoint's of that step.
TEST_F(KeepBestRun, KeepsTheBestModelAndABetterEvaluationAfterAResumeReplacesIt) {
  const std::string run = recipe("best", "", "true");
  RunOutcome killed = bagua_run(run, "BAGUA_FAULT_AT_STEP=1:14");
  ASSERT_NE(killed.exit_code, 0) << killed.output;
  ASSERT_TRUE(fs::exists(out_ / "best" / "model.pt")) << killed.output;
  const int64_t best_before = best_eval()["step"];
  RunOutcome resumed = bagua_run(run);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  ASSERT_TRUE(contains(resumed.output, "resumed from ")) << resumed.output;
  ASSERT_TRUE(contains(resumed.output, bagua::train::step_name(12) + " at step 12")) << resumed.output;

  double minimum = std::numeric_limits<double>::infinity();
  int64_t argmin = -1, flagged_after_resume = 0;
  std::vector<int64_t> steps;
  for (const auto& e : eval_records(out_)) {
    const int64_t step = e["step"];
    steps.push_back(step);
    const double loss = e["eval_loss"];
    EXPECT_EQ(e.contains("best"), loss < minimum) << e.dump();
    if (e.contains("best")) {
      EXPECT_EQ(e["best"], "eval_loss");
    }
    if (loss < minimum) {
      minimum = loss;
      argmin = step;
      if (step > 12) ++flagged_after_resume;
    }
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{4, 8, 12, 16, 20, 24})) << "resumed from step 12";
  EXPECT_GT(flagged_after_resume, 0) << "training went on improving after the resume";
  const json kept = best_eval();
  EXPECT_EQ(kept["step"], argmin);
  EXPECT_GT(argmin, best_before);
  EXPECT_EQ(kept["metric"], "eval_loss");
  EXPECT_EQ(kept["mode"], "min");
  EXPECT_DOUBLE_EQ(kept["eval_loss"].get<double>(), minimum);
  const fs::path best_model = out_ / "best" / "model.pt";
  EXPECT_EQ(max_abs_diff(model_parameters(best_model),
                         checkpoint_parameters(out_ / "checkpoints" / bagua::train::step_name(argmin), best_model)),
            0.0);
  EXPECT_TRUE(contains(resumed.output, "best eval_loss so far")) << resumed.output;
  char summary[64];
  std::snprintf(summary, sizeof(summary), "; best eval_loss %.4f at step %lld in ", minimum,
                static_cast<long long>(argmin));
  EXPECT_TRUE(contains(resumed.output, summary + best_model.string())) << resumed.output;
  EXPECT_FALSE(fs::exists(out_ / ".best.tmp"));
  EXPECT_FALSE(fs::exists(out_ / ".best.old"));
}

// Higher eval_loss is "better" here, so the first evaluation stays the best
// (training lowers the loss): a resumed run that forgot it would keep its
// own first evaluation. Early stop (patience 3) counts across the resume
// too: evaluations 8 and 12 before, 16 after, so the run ends at step 16,
// not at 24.
TEST_F(KeepBestRun, TheBestSoFarAndTheEarlyStopCountSurviveAResume) {
  const std::string goal = "{metric: eval_loss, mode: max}";
  const std::string run = recipe("survive", "{metric: eval_loss, mode: max, patience: 3}", goal);
  RunOutcome killed = bagua_run(run, "BAGUA_FAULT_AT_STEP=1:14");
  ASSERT_NE(killed.exit_code, 0) << killed.output;
  EXPECT_EQ(best_eval()["step"], 4) << killed.output;
  RunOutcome resumed = bagua_run(run);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  ASSERT_TRUE(contains(resumed.output, bagua::train::step_name(12) + " at step 12")) << resumed.output;
  EXPECT_EQ(best_eval()["step"], 4) << resumed.output;
  const fs::path best_model = out_ / "best" / "model.pt";
  EXPECT_EQ(max_abs_diff(model_parameters(best_model),
                         checkpoint_parameters(out_ / "checkpoints" / bagua::train::step_name(4), best_model)),
            0.0);

  const std::vector<json> evals = eval_records(out_);
  ASSERT_FALSE(evals.empty());
  for (const auto& e : evals) EXPECT_EQ(e.contains("best"), e["step"] == 4) << e.dump();
  EXPECT_EQ(evals.back()["step"], 16) << resumed.output;
  EXPECT_EQ(evals.back().value("early_stop", false), true) << evals.back().dump();
  EXPECT_TRUE(contains(resumed.output, "early stop: eval_loss has not improved for 3 evaluations (best "))
      << resumed.output;
  EXPECT_TRUE(contains(resumed.output, " at step 4)")) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "done: 16 steps")) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "(stopped early: train.early_stop)")) << resumed.output;
  for (const auto& j : metrics(out_ / "metrics.jsonl")) EXPECT_LE(j.value("step", 0), 16) << j.dump();
  EXPECT_TRUE(fs::exists(out_ / "model.pt"));
  const json meta = json::parse(read_file(out_ / "checkpoints" / bagua::train::step_name(16) / "meta.json"));
  EXPECT_EQ(meta.value("finished", false), true) << meta.dump();
  EXPECT_EQ(meta["best"]["early_stop"]["evaluations_since"], 3) << meta.dump();
  EXPECT_EQ(meta["best"]["keep_best"]["step"], 4) << meta.dump();

  // The run is complete: the same command does not train again.
  RunOutcome again = bagua_run(run);
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(contains(again.output, "already complete at step 16")) << again.output;

  RunOutcome report = bagua_command("report", out_.string());
  ASSERT_EQ(report.exit_code, 0) << report.output;
  EXPECT_TRUE(contains(report.output, "best model   eval_loss ")) << report.output;
  EXPECT_TRUE(contains(report.output, " at step 4: ")) << report.output;
  EXPECT_TRUE(contains(report.output, "early stop   at step 16")) << report.output;
  const std::string svg = read_file(out_ / "report.svg");
  EXPECT_TRUE(contains(svg, "class=\"highlight\" data-series=\"eval_loss\"")) << svg;
  EXPECT_TRUE(contains(svg, "early stop")) << svg;

  // With more patience the run goes on from its final checkpoint, counting on.
  RunOutcome longer = bagua_run(recipe("survive", "{metric: eval_loss, mode: max, patience: 4}", goal));
  ASSERT_EQ(longer.exit_code, 0) << longer.output;
  EXPECT_TRUE(contains(longer.output, "at step 16")) << longer.output;
  EXPECT_TRUE(contains(longer.output, "early stop: eval_loss has not improved for 4 evaluations")) << longer.output;
  EXPECT_EQ(eval_records(out_).back()["step"], 20) << longer.output;
}

// Asynchronous ranks are not in step: they meet before each evaluation,
// judge the same reduced figures and all end at the same step.
TEST_F(KeepBestRun, AnAsynchronousRunStopsEarlyOnEveryRankAndExitsZero) {
  const std::string run = recipe("async", "{metric: eval_loss, mode: max, patience: 2}", "true") +
                          " --set 'algorithm={name: async, sync_interval_ms: 5, warmup_steps: 0}'";
  RunOutcome r = bagua_run(run);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "early stop: eval_loss has not improved for 2 evaluations")) << r.output;
  const std::vector<json> evals = eval_records(out_);
  ASSERT_FALSE(evals.empty());
  EXPECT_EQ(evals.back().value("early_stop", false), true) << evals.back().dump();
  const int64_t stopped = evals.back()["step"];
  EXPECT_LT(stopped, 24) << r.output;
  // The final checkpoint is collective: every rank reached that step.
  const fs::path last = out_ / "checkpoints" / bagua::train::step_name(stopped);
  EXPECT_TRUE(fs::exists(last / "rank-1.pt")) << r.output;
  EXPECT_EQ(json::parse(read_file(last / "meta.json")).value("finished", false), true);
  EXPECT_TRUE(fs::exists(out_ / "model.pt"));
  EXPECT_TRUE(fs::exists(out_ / "best" / "model.pt"));
  EXPECT_NO_THROW(torch::jit::load((out_ / "best" / "model.pt").string()));
}

}  // namespace
