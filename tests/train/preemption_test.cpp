// Preemption: a scheduler's notice (SIGTERM, SIGUSR1) stops every worker at
// one step with a checkpoint and exits 75, as an agent or as torchrun-style
// workers; a step that never ends is killed after distributed.stop_grace_s.
#include <bagua/launch.h>

#include "support/bagua_run.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

namespace {

using namespace bagua::testing;

// `bagua run ARGS` in the background with extra environment variables
// ("NAME=VALUE NAME=VALUE"), its output into `out`.
pid_t start_run_with_env(const std::string& env, const std::string& args, const fs::path& out) {
  const std::string cmd = "exec env " + env + " " + std::string(BAGUA_CLI) + " run " + args + " > " + out.string() + " 2>&1";
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

int exit_status_of(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The newest complete checkpoint's step, or -1.
int64_t newest_checkpoint_step(const fs::path& dir) {
  int64_t newest = -1;
  if (!fs::exists(dir)) return newest;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !fs::exists(e.path() / "meta.json")) continue;
    newest = std::max<int64_t>(newest, nlohmann::json::parse(read_file(e.path() / "meta.json"))["step"].get<int64_t>());
  }
  return newest;
}

// Rank 1 hangs in a forward pass (a step that never ends): SIGUSR1 cannot
// be honoured at a step boundary, so after distributed.stop_grace_s the
// workers are killed; the run says so, still exits 75, and the same
// command resumes from the checkpoint before.
TEST_F(RunTest, AStepThatNeverEndsIsKilledAfterTheStopGraceAndTheRunStillExits75) {
  const std::string recipe = write_recipe("grace") + " --set distributed.stop_grace_s=2 --set train.log_every_steps=2";
  const fs::path out = dir_ / "grace.out";
  const pid_t pid = start_run_with_env("BAGUA_HANG_AT_STEP=1:10", recipe + " --set train.max_steps=100000", out);
  for (int i = 0; i < 600 && newest_checkpoint_step(dir_ / "grace" / "checkpoints") < 8; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(newest_checkpoint_step(dir_ / "grace" / "checkpoints"), 8) << read_file(out);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // into the hung step 10
  const auto t0 = std::chrono::steady_clock::now();
  kill(pid, SIGUSR1);
  const int code = exit_status_of(pid);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string text = read_file(out);
  EXPECT_EQ(code, 75) << text;
  EXPECT_LT(seconds, 15.0) << text;
  EXPECT_NE(text.find("preempted: the workers did not reach a step boundary within distributed.stop_grace_s (2 s) "
                      "and were killed"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("stopped by a signal at step"), std::string::npos) << text;
  EXPECT_EQ(newest_checkpoint_step(dir_ / "grace" / "checkpoints"), 8);
  RunOutcome resumed = bagua_run(recipe + " --set train.max_steps=12");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 8"), std::string::npos) << resumed.output;
}

// torchrun (or Slurm) starts the workers; no agent of ours. SIGUSR1 to
// rank 0 alone: the ranks agree on one step, write one checkpoint with
// every rank's file, and the one that got the notice exits 75, its peer
// 130; the same command at another world size resumes from that step.
TEST_F(RunTest, ATorchrunWorkerGivenSigusr1StopsItsPeersAtOneStepAndExits75) {
  const std::string recipe = write_recipe("direct") + " --set train.log_every_steps=2";
  const int port = bagua::find_free_port();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string env = "RANK=" + std::to_string(rank) + " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(rank) +
                            " LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                            " OMP_NUM_THREADS=1";
    pids.push_back(start_run_with_env(env, recipe + " --set train.max_steps=100000",
                                      dir_ / ("rank" + std::to_string(rank) + ".out")));
  }
  const fs::path metrics_file = dir_ / "direct" / "metrics.jsonl";
  for (int i = 0; i < 600 && metrics(metrics_file).size() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GE(metrics(metrics_file).size(), 3u) << read_file(dir_ / "rank0.out");
  kill(pids[0], SIGUSR1);
  const int code0 = exit_status_of(pids[0]);
  const int code1 = exit_status_of(pids[1]);
  const std::string text = read_file(dir_ / "rank0.out");
  EXPECT_EQ(code0, 75) << text;
  EXPECT_EQ(code1, 130) << read_file(dir_ / "rank1.out");
  const std::string marker = "stopped by a signal at step ";
  const auto at = text.find(marker);
  ASSERT_NE(at, std::string::npos) << text;
  const int64_t step = std::stoll(text.substr(at + marker.size()));
  EXPECT_EQ(newest_checkpoint_step(dir_ / "direct" / "checkpoints"), step);
  RunOutcome resumed = bagua_run(recipe + " --nproc-per-node 1 --set train.max_steps=" + std::to_string(step + 4));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at step " + std::to_string(step)), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("resized: 2 workers -> 1"), std::string::npos) << resumed.output;
}

// Waits (at most 30 s) until `out` says the agent holds at `point`.
bool held_at(const fs::path& out, const std::string& point) {
  for (int i = 0; i < 300; ++i) {
    if (read_file(out).find("test hold at " + point) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// The agent holds one relay for its whole life (issue 43, item 3). A
// scheduler's notice while it checks the recipe's data and model, before
// any worker: once it killed bagua with 143 and no word; now the run says
// so and exits 75 (Ctrl-C: 130), with no worker started.
TEST_F(RunTest, ANoticeBeforeAnyWorkerStartedEndsTheRunWithItsExitCode) {
  for (const auto& [sig, code] : {std::pair{SIGTERM, 75}, std::pair{SIGINT, 130}}) {
    const std::string name = "early-" + std::to_string(sig);
    const fs::path out = dir_ / (name + ".out");
    const pid_t pid = start_run_with_env("BAGUA_TEST_HOLD=preflight:3", write_recipe(name), out);
    ASSERT_TRUE(held_at(out, "preflight")) << read_file(out);
    kill(pid, sig);
    EXPECT_EQ(exit_status_of(pid), code) << read_file(out);
    EXPECT_NE(read_file(out).find("by " + bagua::signal_name(sig) + " before any worker started (nothing trained)"),
              std::string::npos)
        << read_file(out);
    EXPECT_FALSE(fs::exists(dir_ / name / "logs" / "rank-0.log")) << "no worker started";
  }
}

// A notice that comes after the elastic join's last look for one, before
// the round's workers start, once fell with the join's own relay: the
// node trained the whole round through SIGTERM (and a Kubernetes eviction
// then ended in SIGKILL). Now it stops the workers as they start: exit 75,
// long before max_steps.
TEST_F(RunTest, ANoticeAtTheEndOfAnElasticJoinIsActedOn) {
  const fs::path out = dir_ / "join.out";
  const std::string port = std::to_string(bagua::find_free_port());
  const pid_t pid = start_run_with_env(
      "BAGUA_TEST_HOLD=after-join:2",
      write_recipe("join") + " --nnodes 1:2 --master-port " + port +
          " --set distributed.rdzv_last_call_s=1 --set train.max_steps=2000 --set train.epochs=10",
      out);
  ASSERT_TRUE(held_at(out, "after-join")) << read_file(out);
  kill(pid, SIGTERM);
  const int code = exit_status_of(pid);
  const std::string text = read_file(out);
  EXPECT_EQ(code, 75) << text;
  EXPECT_NE(text.find("round 0: 1 node x 2 workers"), std::string::npos) << text;
  EXPECT_NE(text.find("preempted"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(dir_ / "join" / "model.pt")) << "the round was not trained to its end\n" << text;
}

}  // namespace
