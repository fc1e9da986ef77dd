// What a run prints at its start and its end (issue 42, edge 8): start
// lines of at most 100 columns, one summary line at the end, and on a
// terminal the progress bar left in its final state.
#include "support/bagua_run.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <sstream>
#include <string>

namespace {

using namespace bagua::testing;

TEST_F(RunTest, TheStartLinesFitAHundredColumnsAndTheEndIsOneSummaryLine) {
  const std::string recipe = write_recipe("end");
  RunOutcome r = bagua_run(recipe + " --set train.eval_every=8 --set 'data.eval={format: idx, images: " + kFmnist +
                           "t10k-images-idx3-ubyte.gz, labels: " + kFmnist + "t10k-labels-idx1-ubyte.gz}'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  bool in_start = true, algorithm_line = false;
  int summaries = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("epoch ", 0) == 0) in_start = false;  // the first progress line
    if (in_start) {
      EXPECT_LE(line.size(), 100u) << "a start line wider than 100 columns:\n" << line;
    }
    if (line.rfind("algorithm: gradient_allreduce", 0) == 0) algorithm_line = true;
    if (line.rfind("done: ", 0) == 0) {
      ++summaries;
      EXPECT_TRUE(std::regex_search(line, std::regex("^done: 24 steps in [0-9]+s, final loss [0-9]+\\.[0-9]{4}, "
                                                     "eval accuracy [0-9]+\\.[0-9]{2}%( \\(best [0-9.]+% at step "
                                                     "(8|16)\\))?, [0-9]+ samples/s; model in ")))
          << line;
    }
  }
  EXPECT_TRUE(algorithm_line) << r.output;
  EXPECT_EQ(summaries, 1) << r.output;
}

TEST_F(RunTest, OnATerminalTheProgressBarStaysInItsFinalState) {
  const std::string recipe = write_recipe("bar");
  // script(1) gives the run a terminal (a pty) and copies what it draws.
  const fs::path typescript = dir_ / "typescript";
  const std::string command = std::string(BAGUA_CLI) + " run " + recipe;
  const std::string shell = "script -qfec '" + command + "' " + typescript.string() + " > /dev/null 2>&1";
  ASSERT_EQ(std::system(shell.c_str()), 0) << read_file(typescript);
  const std::string drawn = read_file(typescript);
  const size_t last = drawn.rfind("] 24/24");
  ASSERT_NE(last, std::string::npos) << "the bar reached the last step:\n" << drawn;
  EXPECT_EQ(drawn.find("\033[K", last), std::string::npos)
      << "nothing erased the final bar:\n" << drawn.substr(last);
  EXPECT_NE(drawn.find("done: 24 steps", last), std::string::npos) << drawn.substr(last);
}

// A port held by a plain listening socket of this process (not a store)
// while the object lives; `port` 0 picks a free one.
class HeldPort {
 public:
  explicit HeldPort(int port = 0) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd_, 4) != 0) {
      ADD_FAILURE() << "cannot hold a port";
      return;
    }
    socklen_t len = sizeof(addr);
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) port_ = ntohs(addr.sin_port);
  }
  ~HeldPort() {
    if (fd_ >= 0) ::close(fd_);
  }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  std::string port() const { return std::to_string(port_); }

 private:
  int fd_;
  int port_ = 0;
};

// A port in use is one line from bagua, not LibTorch's log lines before it
// (glog's "Logging before InitGoogleLogging()", c10d's bind warnings).
TEST_F(RunTest, APortInUseIsOneLineWithoutLibTorchsLogNoise) {
  std::string port;
  {
    HeldPort held;
    port = held.port();
    RunOutcome r = bagua_run(write_recipe("port") + " --master-port " + port);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "distributed.master_port")) << r.output;
    EXPECT_FALSE(contains(r.output, "InitGoogleLogging")) << r.output;
    EXPECT_FALSE(contains(r.output, "socket.cpp")) << r.output;
  }
  // BAGUA_DEBUG keeps them.
  HeldPort again(std::stoi(port));
  RunOutcome debug = bagua_run(write_recipe("port-debug") + " --master-port " + again.port(), "BAGUA_DEBUG=1");
  EXPECT_EQ(debug.exit_code, 2) << debug.output;
  EXPECT_TRUE(contains(debug.output, "socket.cpp")) << "BAGUA_DEBUG shows LibTorch's lines:\n" << debug.output;
}

// An elastic job whose store port is held by another program (issue 43,
// item 12): said at once, not taken for the store (the node then waited out
// distributed.timeout_s as the program never answered).
TEST_F(RunTest, AnElasticJobsPortHeldByAnotherProgramIsSaidAtOnce) {
  HeldPort held;
  const auto t0 = std::chrono::steady_clock::now();
  RunOutcome r = bagua_run(write_recipe("foreign") + " --nnodes 1:2 --master-port " + held.port() +
                           " --set distributed.timeout_s=120");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "is held by a process that is not a bagua rendezvous store")) << r.output;
  EXPECT_LT(seconds, 60.0) << "not after distributed.timeout_s";
}

// A run extended on resume (a raised max_steps) under a cosine schedule
// over the whole run: the rate follows the longer run's curve, higher
// again, and the resumed run says so (the checkpoint records the length).
TEST_F(RunTest, ExtendingARunUnderACosineScheduleSaysTheRateFollowsTheNewLength) {
  const std::string recipe = write_recipe("cosine", "scheduler: {type: cosine}\n");
  RunOutcome first = bagua_run(recipe);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_FALSE(contains(first.output, "learning-rate schedule now spans")) << first.output;
  RunOutcome longer = bagua_run(recipe + " --set train.max_steps=32");
  ASSERT_EQ(longer.exit_code, 0) << longer.output;
  EXPECT_TRUE(contains(longer.output, "note: the cosine learning-rate schedule now spans 32 steps, not the 24 of the "
                                      "run before (train.epochs or train.max_steps changed): from step 24"))
      << longer.output;
}

}  // namespace
