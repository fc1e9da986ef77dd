// An elastic job's end on every way out (issue 43, item 5): the store of
// `bagua store` stops when the job marks its end, and when every node that
// joined has left without marking it; a round below MIN marks the end; a
// node that comes after the job finished exits 0. On loopback: the nodes
// are agents on this machine.
#include "support/bagua_run.h"

#include <bagua/system.h>

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace {

using namespace bagua::testing;
using Clock = std::chrono::steady_clock;

// `bagua ARGS` in the background (its own process group), output into `out`.
class Background {
 public:
  Background(const std::string& args, const fs::path& out) : out_(out) {
    const std::string cmd = "exec " + std::string(BAGUA_CLI) + " " + args + " > " + out.string() + " 2>&1 < /dev/null";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Background() {
    if (code_ < 0) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // Waits at most `limit` for the exit; -1 when it is still running.
  int wait(std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (code_ < 0 && Clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return code_;
  }
  bool says(const std::string& text, std::chrono::seconds limit = std::chrono::seconds(60)) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      if (contains(output(), text)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  void signal(int sig) { ::kill(pid_, sig); }
  std::string output() const { return read_file(out_); }

 private:
  fs::path out_;
  pid_t pid_ = -1;
  int code_ = -1;
};

// Every node left without the job's end (interrupted while it waited for a
// second node): `bagua store` stops once they are all gone for --idle-s,
// instead of serving for ever (the Kubernetes example's store pod).
TEST_F(RunTest, TheStoreStopsOnceEveryNodeLeftWithoutMarkingTheEnd) {
  const std::string port = std::to_string(bagua::find_free_port());
  Background store("store --port " + port + " --idle-s 2", dir_ / "store.out");
  ASSERT_TRUE(store.says("serving")) << store.output();
  Background node("run " + write_recipe("left") + " --nnodes 2:3 --rdzv-endpoint 127.0.0.1:" + port,
                  dir_ / "node.out");
  ASSERT_TRUE(node.says("this node arrived 1st")) << node.output();
  EXPECT_EQ(store.wait(std::chrono::seconds(4)), -1) << "a node is there: the store serves on\n" << store.output();
  node.signal(SIGTERM);
  EXPECT_EQ(node.wait(std::chrono::seconds(30)), 75) << node.output();
  const auto left = Clock::now();
  EXPECT_EQ(store.wait(std::chrono::seconds(30)), 0) << store.output();
  EXPECT_LT(Clock::now() - left, std::chrono::seconds(15)) << "the node marked itself left: no lapse waited out";
  EXPECT_TRUE(contains(store.output(), "every node of the elastic job (1) has left or stopped answering"))
      << store.output();
}

// A round below MIN for distributed.timeout_s ends the job for every node,
// and says so in the store: the store stops, and a node that comes later
// learns it at once instead of waiting out its own timeout.
TEST_F(RunTest, ARoundBelowMinimumMarksTheJobEnded) {
  const std::string port = std::to_string(bagua::find_free_port());
  Background store("store --port " + port, dir_ / "store.out");
  ASSERT_TRUE(store.says("serving")) << store.output();
  const std::string recipe = write_recipe("below");
  RunOutcome alone =
      bagua_run(recipe + " --nnodes 2:3 --rdzv-endpoint 127.0.0.1:" + port + " --set distributed.timeout_s=3");
  EXPECT_EQ(alone.exit_code, 3) << alone.output;
  EXPECT_TRUE(contains(alone.output, "fewer than the 2 it needs")) << alone.output;
  const auto t0 = Clock::now();
  RunOutcome late =
      bagua_run(recipe + " --nnodes 2:3 --rdzv-endpoint 127.0.0.1:" + port + " --set distributed.timeout_s=60");
  EXPECT_EQ(late.exit_code, 3) << late.output;
  EXPECT_TRUE(contains(late.output, "the job has ended")) << late.output;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(30)) << "not after its own timeout_s";
  EXPECT_EQ(store.wait(std::chrono::seconds(30)), 0) << store.output();
  EXPECT_TRUE(contains(store.output(), "the elastic job has ended; the store stops")) << store.output();
}

// A node that comes after the elastic job finished (a replacement pod, its
// store gone): "already complete", exit 0, as the examples promise, not 3
// after distributed.timeout_s.
TEST_F(RunTest, ANodeThatComesAfterTheElasticJobFinishedExitsZero) {
  const std::string recipe = write_recipe("late", "", "tests/fixtures/models/mlp_small.pt");
  const std::string args = recipe + " --nnodes 1:2 --set distributed.rdzv_last_call_s=1 --set train.max_steps=8";
  RunOutcome job = bagua_run(args + " --master-port " + std::to_string(bagua::find_free_port()));
  ASSERT_EQ(job.exit_code, 0) << job.output;
  // Its store was in that job's agent, gone now: nothing listens on this port.
  const auto t0 = Clock::now();
  RunOutcome late = bagua_run(args + " --rdzv-endpoint 127.0.0.1:" + std::to_string(bagua::find_free_port()) +
                              " --set distributed.timeout_s=60");
  EXPECT_EQ(late.exit_code, 0) << late.output;
  EXPECT_TRUE(contains(late.output, "is already complete at step 8")) << late.output;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(30));
}

// A node that runs another number of workers than the job's (issue 43,
// item 4) is refused as it arrives, alone: exit 2 naming both numbers,
// while the job trains on undisturbed (no new round) and finishes.
TEST_F(RunTest, AJoinerWithAnotherWorkerCountIsRefusedAloneAndTheJobGoesOn) {
  const std::string port = std::to_string(bagua::find_free_port());
  const std::string args = write_recipe("mismatch") + " --nnodes 1:2 --master-port " + port +
                           " --set distributed.rdzv_last_call_s=1 --set train.max_steps=1500";
  Background job("run " + args, dir_ / "job.out");
  ASSERT_TRUE(job.says("round 0: 1 node x 2 workers")) << job.output();
  RunOutcome joiner = bagua_run(args + " --nproc-per-node 1");
  EXPECT_EQ(joiner.exit_code, 2) << joiner.output;
  EXPECT_TRUE(contains(joiner.output, "runs 1 workers, the elastic job's nodes 2 each")) << joiner.output;
  EXPECT_TRUE(contains(joiner.output, "it is not admitted, and the job goes on without it")) << joiner.output;
  EXPECT_EQ(job.wait(std::chrono::seconds(180)), 0) << job.output();
  EXPECT_FALSE(contains(job.output(), "round 1")) << "the job was not disturbed\n" << job.output();
  EXPECT_TRUE(fs::exists(dir_ / "mismatch" / "model.pt")) << job.output();
}

}  // namespace
