// The run's summary line (train/run_log.h): its "(best ...)" names an
// earlier evaluation only when it was better than the last, and after a
// resume the best counts the evaluations of the runs before, up to the
// checkpoint resumed from.
#include "train/run_log.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;
using bagua::metrics::EvalRecord;
using bagua::train::RunLog;

class RunLogSummary : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("BAGUA_PROGRESS", "plain", 1);
    dir_ = fs::temp_directory_path() / ("bagua-runlog-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "metrics.jsonl").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  static EvalRecord eval(int64_t step, double loss, double accuracy) {
    EvalRecord r;
    r.step = step;
    r.eval_loss = loss;
    r.eval_accuracy = accuracy;
    r.eval_samples = 10;
    return r;
  }

  fs::path dir_;
  std::string path_;
};

TEST_F(RunLogSummary, TheBestIsNamedOnlyWhenBetterThanTheLast) {
  {
    RunLog log(path_, true, 30, false);
    log.eval(eval(10, 0.5, 0.80));
    log.eval(eval(20, 0.4, 0.90));
    log.eval(eval(30, 0.3, 0.90));  // equal to the best: nothing to add
    EXPECT_EQ(log.summary(30).find("(best"), std::string::npos) << log.summary(30);
    EXPECT_NE(log.summary(30).find("eval accuracy 90.00%"), std::string::npos) << log.summary(30);
  }
  RunLog log(path_, true, 30, false);
  log.eval(eval(10, 0.5, 0.80));
  log.eval(eval(20, 0.4, 0.90));
  log.eval(eval(30, 0.3, 0.85));
  EXPECT_NE(log.summary(30).find("eval accuracy 85.00% (best 90.00% at step 20)"), std::string::npos)
      << log.summary(30);
}

TEST_F(RunLogSummary, AResumedRunCountsTheEvaluationsBeforeItsCheckpoint) {
  {
    RunLog first(path_, true, 40, false);
    first.eval(eval(10, 0.5, 0.90));  // the best, before the checkpoint at 20
    first.eval(eval(20, 0.4, 0.80));
    first.eval(eval(30, 0.3, 0.95));  // after it: redone by the resumed run
  }
  RunLog resumed(path_, true, 40, true, 20);
  resumed.eval(eval(30, 0.35, 0.85));
  resumed.eval(eval(40, 0.3, 0.88));
  EXPECT_NE(resumed.summary(40).find("eval accuracy 88.00% (best 90.00% at step 10)"), std::string::npos)
      << resumed.summary(40);
}

}  // namespace
