// The run agent's pure parts (bagua/run_agent.h): the restart policy on
// every kind of attempt, how a process knows what it was started as, and
// the Slurm task layout. No process is started here.
#include <bagua/exit_codes.h>
#include <bagua/run_agent.h>

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

using bagua::AttemptDecision;
using Action = AttemptDecision::Action;
using Reason = AttemptDecision::Reason;

bagua::LaunchResult failed(int status, bool signaled = false) {
  bagua::LaunchResult r;
  bagua::WorkerExit w;
  w.rank = 1;
  w.status = status;
  w.signaled = signaled;
  r.first_failure = w;
  return r;
}

TEST(RestartPolicy, SuccessFinishesWithZero) {
  bagua::LaunchResult ok;
  ok.ok = true;
  const auto d = bagua::decide_after_attempt(ok, 0, 3);
  EXPECT_EQ(d.action, Action::kFinish);
  EXPECT_EQ(d.reason, Reason::kSucceeded);
  EXPECT_EQ(d.exit_code, bagua::kExitOk);
}

TEST(RestartPolicy, ACrashRestartsWhileRestartsAreLeft) {
  for (const auto& r : {failed(9, /*signaled=*/true), failed(1), failed(3)}) {
    const auto first = bagua::decide_after_attempt(r, 0, 2);
    EXPECT_EQ(first.action, Action::kRestart);
    EXPECT_EQ(first.reason, Reason::kRestartable);
    EXPECT_EQ(bagua::decide_after_attempt(r, 1, 2).action, Action::kRestart);
    const auto last = bagua::decide_after_attempt(r, 2, 2);
    EXPECT_EQ(last.action, Action::kFinish);
    EXPECT_EQ(last.reason, Reason::kRestartsExhausted);
    EXPECT_EQ(last.exit_code, bagua::kExitWorkerFailed);
  }
  EXPECT_EQ(bagua::decide_after_attempt(failed(1), 0, 0).reason, Reason::kRestartsExhausted)
      << "max_restarts: 0 never restarts";
}

TEST(RestartPolicy, BadInputAndDivergenceAreNeverRestartedAndGiveTheirCode) {
  for (int code : {bagua::kExitInvalidInput, bagua::kExitDiverged}) {
    const auto d = bagua::decide_after_attempt(failed(code), 0, 5);
    EXPECT_EQ(d.action, Action::kFinish) << code;
    EXPECT_EQ(d.reason, Reason::kWouldFailAgain) << code;
    EXPECT_EQ(d.exit_code, code);
  }
  // Killed by signal 2 or 4 (SIGINT, SIGILL) is not the exit code 2 or 4.
  EXPECT_EQ(bagua::decide_after_attempt(failed(4, /*signaled=*/true), 0, 1).action, Action::kRestart);
}

TEST(RestartPolicy, StoppingTogetherAndInterruptsFinishWith130) {
  const auto agreed = bagua::decide_after_attempt(failed(bagua::kExitInterrupted), 0, 5);
  EXPECT_EQ(agreed.reason, Reason::kStoppedByAgreement);
  EXPECT_EQ(agreed.exit_code, bagua::kExitInterrupted);
  bagua::LaunchResult interrupted = failed(9, true);
  interrupted.interrupted = true;
  const auto d = bagua::decide_after_attempt(interrupted, 0, 5);
  EXPECT_EQ(d.action, Action::kFinish);
  EXPECT_EQ(d.reason, Reason::kInterrupted);
  EXPECT_EQ(d.exit_code, bagua::kExitInterrupted);
}

// Sets and restores environment variables.
class Env {
 public:
  ~Env() {
    for (const auto& name : set_) unsetenv(name.c_str());
  }
  void set(const std::string& name, const std::string& value) {
    setenv(name.c_str(), value.c_str(), 1);
    set_.push_back(name);
  }

 private:
  std::vector<std::string> set_;
};

TEST(StartedAs, TorchrunVariablesBeatSlurmsAndNeitherMeansTheAgent) {
  for (const char* v : {"RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"}) unsetenv(v);
  EXPECT_EQ(bagua::started_as(), bagua::StartedAs::kAgent);
  Env env;
  env.set("SLURM_PROCID", "3");
  env.set("SLURM_NTASKS", "4");
  EXPECT_EQ(bagua::started_as(), bagua::StartedAs::kSlurmTask);
  env.set("RANK", "0");
  EXPECT_EQ(bagua::started_as(), bagua::StartedAs::kSlurmTask) << "RANK alone is not a torchrun worker";
  env.set("WORLD_SIZE", "2");
  EXPECT_EQ(bagua::started_as(), bagua::StartedAs::kTorchrunWorker);
}

TEST(SlurmLayout, TasksOnThisNodeFromTheCompressedList) {
  for (const char* v : {"SLURM_TASKS_PER_NODE", "SLURM_NODEID", "SLURM_NTASKS_PER_NODE"}) unsetenv(v);
  EXPECT_FALSE(bagua::slurm_tasks_on_this_node());
  Env env;
  env.set("SLURM_TASKS_PER_NODE", "2(x3),1");
  const std::pair<const char*, int> expected[] = {{"0", 2}, {"2", 2}, {"3", 1}};
  for (const auto& [node, tasks] : expected) {
    env.set("SLURM_NODEID", node);
    EXPECT_EQ(bagua::slurm_tasks_on_this_node(), tasks) << "node " << node;
  }
  env.set("SLURM_TASKS_PER_NODE", "3,5");
  env.set("SLURM_NODEID", "1");
  EXPECT_EQ(bagua::slurm_tasks_on_this_node(), 5);
}

TEST(OutputLock, ASecondRunIsToldWhoHoldsTheDirectory) {
  const auto dir = std::filesystem::temp_directory_path() / ("bagua-lock-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  static bagua::OutputLock first;  // held until this process exits, as the agent holds it
  EXPECT_FALSE(first.acquire(dir, 0));
  // flock is per open file description: a second open in this process conflicts too.
  bagua::OutputLock second;
  auto busy = second.acquire(dir, 0);
  ASSERT_TRUE(busy);
  EXPECT_NE(busy->find("is in use by another run (bagua run, pid " + std::to_string(getpid())), std::string::npos)
      << *busy;
  bagua::OutputLock other_node;
  EXPECT_FALSE(other_node.acquire(dir, 1)) << "each node of a job has its own lock";
}

TEST(AttemptLogs, EachAttemptsLogsMoveToTheirOwnFolder) {
  const auto dir = std::filesystem::temp_directory_path() / ("bagua-logs-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "rank-0.log") << "first attempt\n";
  std::ofstream(dir / "redis-node-0.log") << "the cache's log stays\n";
  EXPECT_FALSE(bagua::keep_attempt_logs(dir, 0));
  EXPECT_TRUE(std::filesystem::exists(dir / "attempt-0" / "rank-0.log"));
  EXPECT_FALSE(std::filesystem::exists(dir / "rank-0.log"));
  EXPECT_TRUE(std::filesystem::exists(dir / "redis-node-0.log"));
  std::filesystem::remove_all(dir);
}

}  // namespace
