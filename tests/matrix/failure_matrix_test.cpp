// The failure matrix (docs/run.md, "The failure matrix"): every algorithm
// under every failure, each cell a real `bagua run` of 2 workers on a tiny
// MLP, ending as the table says: its exit code, who is named, what is kept.
// Every checkpoint a cell leaves must hold every rank's file, verified, and
// a resumed cell must resume from it without a warning.
#include "support/algorithm_cells.h"
#include "support/bagua_run.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <regex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace bagua::testing {
namespace {

// The algorithm's recipe lines (--set arguments), one machine: async-like
// averaging every 5 ms, a required optimizer's warm-up over in 5 steps.
std::string algorithm_sets(const std::string& algorithm) {
  return one_machine_sets(algorithm, {{"sync_interval_ms", 5}}, "lr: 0.001, warmup_steps: 5");
}

bool keeps_bucket_state(const std::string& algorithm) { return descriptor_of(algorithm).traits.keeps_bucket_state; }

// Starts `bagua run ARGS` in the background (output to `out`); its pid.
pid_t start_run(const std::string& args, const std::string& env, const fs::path& out) {
  const std::string cmd = env + " exec " + std::string(BAGUA_CLI) + " run " + args + " > " + out.string() +
                          " 2>&1 < /dev/null";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

using Cell = std::tuple<std::string, std::string>;  // algorithm, failure

class FailureMatrix : public RunTest, public ::testing::WithParamInterface<Cell> {
 protected:
  void SetUp() override {
    RunTest::SetUp();
    std::tie(algorithm_, failure_) = GetParam();
    recipe_ = write_recipe("cell") + algorithm_sets(algorithm_) + " --set train.log_every_steps=4" +
              " --set 'data.eval={format: idx, images: " + kFmnist + "t10k-images-idx3-ubyte.gz, labels: " + kFmnist +
              "t10k-labels-idx1-ubyte.gz}' --set train.eval_every=never";
    out_ = dir_ / "cell";
  }

  // Every complete checkpoint lists every rank's file, each present with
  // the size meta.json gives, and nothing is left half-written.
  void expect_checkpoints_whole(const std::string& context) {
    const fs::path dir = out_ / "checkpoints";
    if (!fs::exists(dir)) return;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      EXPECT_NE(name.rfind(".step-", 0), 0u) << "a leftover " << name << "\n" << context;
      if (name.rfind("step-", 0) != 0) continue;
      const auto meta = nlohmann::json::parse(read_file(entry.path() / "meta.json"));
      for (const char* file : {"rank-0.pt", "rank-1.pt", "model.pt"}) {
        ASSERT_TRUE(meta["files"].contains(file)) << name << ": " << meta.dump();
        ASSERT_TRUE(fs::exists(entry.path() / file)) << name << "/" << file << "\n" << context;
        EXPECT_EQ(fs::file_size(entry.path() / file), meta["files"][file]["bytes"].get<uint64_t>()) << name << "/" << file;
      }
    }
  }

  // The newest complete checkpoint's directory ("" when none).
  fs::path newest_checkpoint() {
    fs::path newest;
    if (!fs::exists(out_ / "checkpoints")) return newest;
    for (const auto& entry : fs::directory_iterator(out_ / "checkpoints")) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("step-", 0) == 0 && (newest.empty() || name > newest.filename().string())) newest = entry.path();
    }
    return newest;
  }

  // The same command resumes from the newest checkpoint for `more` steps,
  // with no complaint about the checkpoint, and finishes.
  void expect_clean_resume(int64_t more) {
    const fs::path from = newest_checkpoint();
    ASSERT_FALSE(from.empty());
    const int64_t step = nlohmann::json::parse(read_file(from / "meta.json"))["step"];
    RunOutcome r = bagua_run(recipe_ + " --set train.max_steps=" + std::to_string(step + more));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "resumed from " + from.string())) << r.output;
    EXPECT_FALSE(contains(r.output, "WARNING: checkpoint")) << r.output;
    EXPECT_FALSE(contains(r.output, "did not finish writing")) << r.output;
    EXPECT_FALSE(contains(r.output, "set aside")) << r.output;
    EXPECT_TRUE(fs::exists(out_ / "model.pt")) << r.output;
    expect_checkpoints_whole(r.output);
  }

  void expect_finite_model() {
    ASSERT_TRUE(fs::exists(out_ / "model.pt"));
    for (const auto& p : model_parameters(out_ / "model.pt")) EXPECT_TRUE(p.isfinite().all().item<bool>());
  }

  std::string algorithm_, failure_, recipe_;
  fs::path out_;
};

TEST_P(FailureMatrix, EndsAsTheTableSays) {
  if (failure_ == "nonfinite_stop") {
    // Rank 1's loss is NaN at step 11: exit 4 naming rank 1; the checkpoint
    // of step 8 is kept, no model.pt.
    RunOutcome r = bagua_run(recipe_ + " --set train.max_steps=24 --set train.on_nonfinite=stop",
                             "BAGUA_NAN_AT_STEP=1:10");
    EXPECT_EQ(r.exit_code, 4) << r.output;
    EXPECT_TRUE(contains(r.output, "the training diverged at step 11")) << r.output;
    EXPECT_TRUE(contains(r.output, "on rank 1")) << r.output;
    EXPECT_FALSE(fs::exists(out_ / "model.pt"));
    EXPECT_TRUE(fs::exists(out_ / "checkpoints" / "step-00000008" / "meta.json")) << r.output;
    expect_checkpoints_whole(r.output);
  } else if (failure_ == "nonfinite_skip") {
    // The step is skipped (on every rank, or on rank 1 alone under async)
    // and the run finishes with finite weights.
    RunOutcome r = bagua_run(recipe_ + " --set train.max_steps=24 --set train.on_nonfinite=skip_step",
                             "BAGUA_NAN_AT_STEP=1:10");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (!descriptor_of(algorithm_).traits.synchronous) {
      EXPECT_TRUE(contains(read_file(out_ / "logs" / "rank-1.log"),
                           "skipped that optimizer step on rank 1 (async ranks skip alone)"))
          << r.output;
    } else {
      EXPECT_TRUE(contains(r.output, "step 11: a loss or gradient is NaN or infinite; skipped that optimizer step "
                                     "on every worker"))
          << r.output;
    }
    expect_finite_model();
    expect_checkpoints_whole(r.output);
  } else if (failure_ == "sigint_resume") {
    // Ctrl-C: every rank stops at one step with a checkpoint (exit 130);
    // the same command resumes from it.
    // Each step in 2 micro-batches (train.grad_accum_steps): the stop
    // falls between steps, never between micro-batches.
    const fs::path log = dir_ / "run.out";
    recipe_ += " --set train.grad_accum_steps=2";
    const pid_t pid = start_run(recipe_ + " --set train.max_steps=100000", "", log);
    for (int i = 0; i < 600 && metrics(out_ / "metrics.jsonl").size() < 5; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::kill(pid, SIGINT);
    const int code = wait_exit(pid);
    const std::string text = read_file(log);
    ASSERT_EQ(code, 130) << text;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(text, m, std::regex("stopped by a signal at step ([0-9]+)"))) << text;
    const fs::path newest = newest_checkpoint();
    ASSERT_FALSE(newest.empty()) << text;
    EXPECT_EQ(nlohmann::json::parse(read_file(newest / "meta.json"))["step"].get<int64_t>(), std::stoll(m[1]));
    expect_checkpoints_whole(text);
    expect_clean_resume(6);
  } else if (failure_ == "kill9_restart") {
    // Rank 1 is killed (SIGKILL) at step 13: with max_restarts 1 both are
    // restarted from the checkpoint of step 8 and the run finishes; in
    // bf16 with clipping, as transformer recipes train.
    RunOutcome r = bagua_run(recipe_ + " --set train.max_steps=24 --set distributed.max_restarts=1"
                                       " --set train.precision=bf16 --set train.clip_grad_norm=1.0",
                             "BAGUA_FAULT_AT_STEP=1:13");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "rank 1")) << r.output;
    EXPECT_TRUE(contains(r.output, "resumed from " + (out_ / "checkpoints" / "step-00000008").string())) << r.output;
    expect_finite_model();
    expect_checkpoints_whole(r.output);
  } else if (failure_ == "stalled_worker") {
    // Rank 1 freezes (SIGSTOP) at step 10: named, the job ends (exit 3)
    // within seconds of the 10 s timeout; the checkpoint of step 8 is kept.
    const auto t0 = std::chrono::steady_clock::now();
    RunOutcome r = bagua_run(recipe_ + " --set train.max_steps=2000 --set distributed.timeout_s=10",
                             "BAGUA_STOP_AT_STEP=1:10");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_TRUE(contains(r.output, "rank 1 (node 0) stopped reporting progress")) << r.output;
    EXPECT_LT(seconds, 40.0) << r.output;
    expect_checkpoints_whole(r.output);
  } else if (failure_ == "cache_server_killed") {
    // data.cache on a spawned server that is killed while rank 0 is
    // stopped at step 6: each worker warns once and the run finishes.
    const fs::path log = dir_ / "run.out";
    const std::string marker = (dir_ / "cell.yaml").string();
    const pid_t pid = start_run(recipe_ + " --set train.max_steps=24 --set 'data.cache={dataset_name: cell}'",
                                "BAGUA_STOP_AT_STEP=0:6", log);
    const pid_t frozen = stopped_worker(marker);
    std::smatch m;
    const std::string started = read_file(log);
    const bool found = std::regex_search(started, m, std::regex("started redis-server \\(pid ([0-9]+)\\)"));
    if (found) ::kill(static_cast<pid_t>(std::stol(m[1])), SIGKILL);
    if (frozen > 0) ::kill(frozen, SIGCONT);
    const int code = wait_exit(pid);
    const std::string text = read_file(log);
    ASSERT_GT(frozen, 0) << text;
    ASSERT_TRUE(found) << text;
    EXPECT_EQ(code, 0) << text;
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_TRUE(contains(read_file(out_ / "logs" / ("rank-" + std::to_string(rank) + ".log")),
                           "dataset cache 'cell' unavailable"))
          << "rank " << rank << "\n" << text;
    }
    expect_finite_model();
    expect_checkpoints_whole(text);
  } else if (failure_ == "bucket_auto") {
    if (keeps_bucket_state(algorithm_)) {
      // Refused before anything starts, with the reason.
      RunOutcome v = bagua_command("validate", recipe_ + " --set algorithm.bucket_size=auto");
      EXPECT_EQ(v.exit_code, 2) << v.output;
      EXPECT_TRUE(contains(v.output, "per-bucket state")) << v.output;
      return;
    }
    RunOutcome r = bagua_run(recipe_ + " --set train.max_steps=24 --set algorithm.bucket_size=auto");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "bucket_size auto: chose ")) << r.output;
    bool recorded = false;
    for (const auto& j : metrics(out_ / "metrics.jsonl")) recorded = recorded || j.contains("autotune");
    EXPECT_TRUE(recorded);
    expect_checkpoints_whole(r.output);
    const fs::path newest = newest_checkpoint();
    ASSERT_FALSE(newest.empty());
    EXPECT_TRUE(nlohmann::json::parse(read_file(newest / "meta.json")).contains("tuned_bucket_bytes"));
  } else if (failure_ == "eval_and_checkpoint_together") {
    // An evaluation and a checkpoint at every 8th step, both collectives.
    RunOutcome r = bagua_run(recipe_ + " --set train.max_steps=24 --set train.eval_every=8");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::vector<int64_t> evals;
    for (const auto& j : metrics(out_ / "metrics.jsonl")) {
      if (j.contains("eval_loss")) evals.push_back(j["step"]);
    }
    EXPECT_EQ(evals, (std::vector<int64_t>{8, 16, 24})) << r.output;
    EXPECT_TRUE(fs::exists(out_ / "checkpoints" / "step-00000016" / "meta.json")) << r.output;
    expect_checkpoints_whole(r.output);
    expect_clean_resume(8);
  } else if (failure_ == "resize_resume") {
    // A resume at another world size where the features meet: the dataset
    // cache (a spawned redis-server, a new one for the resumed run), a
    // fused optimizer (where the algorithm requires none), bucket_size
    // auto (where it keeps no per-bucket state). 2 workers to step 12,
    // then 3 to step 20: resized and finished, with nothing to warn about.
    std::string recipe = recipe_ + " --set 'data.cache={dataset_name: cell}'";
    if (descriptor_of(algorithm_).traits.required_optimizer.empty()) {
      recipe += " --set 'optimizers=[{type: sgd, lr: 0.05, momentum: 0.9, fused: true}]'";
    }
    if (!keeps_bucket_state(algorithm_)) recipe += " --set algorithm.bucket_size=auto";
    RunOutcome first = bagua_run(recipe + " --set train.max_steps=12");
    ASSERT_EQ(first.exit_code, 0) << first.output;
    const fs::path from = newest_checkpoint();
    ASSERT_FALSE(from.empty()) << first.output;
    RunOutcome grown = bagua_run(recipe + " --set train.max_steps=20 --nproc-per-node 3");
    EXPECT_EQ(grown.exit_code, 0) << grown.output;
    EXPECT_TRUE(contains(grown.output, "resumed from " + from.string())) << grown.output;
    EXPECT_TRUE(contains(grown.output, "resized: 2 workers -> 3")) << grown.output;
    EXPECT_TRUE(contains(grown.output, "done: 20 steps")) << grown.output;
    EXPECT_FALSE(contains(grown.output, "WARNING")) << grown.output;
    EXPECT_TRUE(contains(grown.output, "data.cache: started redis-server")) << grown.output;
    EXPECT_FALSE(contains(read_file(out_ / "logs" / "rank-2.log"), "dataset cache")) << "no cache warning on rank 2";
    expect_finite_model();
    expect_checkpoints_whole(grown.output);
  } else {
    FAIL() << "unknown failure " << failure_;
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryAlgorithm, FailureMatrix,
    ::testing::Combine(::testing::ValuesIn(every_algorithm()),
                       ::testing::Values("nonfinite_stop", "nonfinite_skip", "sigint_resume", "kill9_restart",
                                         "stalled_worker", "cache_server_killed", "bucket_auto",
                                         "eval_and_checkpoint_together", "resize_resume")),
    [](const ::testing::TestParamInfo<Cell>& info) {
      return std::get<0>(info.param) + "_" + std::get<1>(info.param);
    });

}  // namespace
}  // namespace bagua::testing
