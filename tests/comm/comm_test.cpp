// Multi-process tests of the communication layer: real worker processes
// (this same binary, in scenario mode) started by LocalSupervisor or by the
// real `bagua launch`, talking over real sockets through Gloo.
#include <bagua/communication.h>
#include <bagua/errors.h>
#include <bagua/launch.h>

#include "support/multiprocess.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

namespace {

using namespace bagua::testing;

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, EveryCollectiveOpAndDtypeGivesExactValues) {
  int world = GetParam();
  expect_all_checks_passed(run_workers("collectives", world), world);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Collectives, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// The same exact checks on CUDA tensors (GPU machines only; CI has none:
// scripts/gpu-check.sh runs these). World size 1 over NCCL (CPU tensors in
// the scenario are staged through the GPU); several ranks sharing the one
// GPU over Gloo (CUDA tensors staged through host memory), since NCCL
// refuses two ranks on one device.
class CudaCollectives : public ::testing::TestWithParam<int> {};

TEST_P(CudaCollectives, EveryCollectiveOpAndDtypeGivesExactValuesOnCudaTensors) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible (or a CPU build of LibTorch)";
  int world = GetParam();
  std::string backend = world == 1 ? "nccl" : "gloo";
  expect_all_checks_passed(run_workers("collectives", world,
                                       {{"BAGUA_TEST_DEVICE", "cuda"},
                                        {"BAGUA_BACKEND", world == 1 ? "auto" : "gloo"},
                                        {"BAGUA_TEST_EXPECT_BACKEND", backend}}),
                           world);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CudaCollectives, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(Backend, NcclWithMoreWorkersThanGpusIsAClearError) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible (or a CPU build of LibTorch)";
  int gpus = static_cast<int>(torch::cuda::device_count());
  auto o = run_workers("join", gpus + 1, {{"BAGUA_BACKEND", "nccl"}, {"BAGUA_TIMEOUT_S", "20"}});
  EXPECT_FALSE(o.result.ok);
  EXPECT_NE(o.output.find("backend nccl needs one GPU per worker"), std::string::npos) << o.output;
}

TEST(Backend, NcclOnACpuBuildIsAClearError) {
#ifdef BAGUA_WITH_CUDA
  GTEST_SKIP() << "this is a CUDA build";
#endif
  auto o = run_workers("join", 1, {{"BAGUA_BACKEND", "nccl"}, {"BAGUA_TIMEOUT_S", "20"}});
  EXPECT_FALSE(o.result.ok);
  EXPECT_NE(o.output.find("needs a CUDA build of bagua"), std::string::npos) << o.output;
}

TEST(Groups, SingleNodeSubGroups) {
  expect_all_checks_passed(run_workers("groups", 3), 3);
}

// Two simulated nodes of two ranks each: two real `bagua launch` processes
// with --nnodes 2 and their own --node-rank, meeting at one port.
TEST(Groups, TwoSimulatedNodesThroughBaguaLaunch) {
  expect_all_checks_passed(run_nodes("groups", 2, 2), 4);
}

// isend/irecv as a ring exchange posts them (every call before any wait),
// with the argument check on and off: nothing waits on a peer's call
// (a checked call once did, and every rank hung), several messages of one
// tag arrive in order, and a size mismatch fails both sides clearly.
TEST(PointToPoint, ARingExchangeOfNonBlockingCallsCompletesCheckedOrNot) {
  for (int world : {2, 3}) expect_all_checks_passed(run_workers("p2p_ring", world, {{"BAGUA_TIMEOUT_S", "30"}}), world);
}

TEST(Errors, DisagreeingRanksGetAClearErrorOnEveryRank) {
  expect_all_checks_passed(run_workers("mismatch", 3), 3);
}

TEST(Errors, APeerThatDiesFailsTheCollectiveInsteadOfHanging) {
  auto o = run_workers("peer_dies", 3, {{"BAGUA_TIMEOUT_S", "20"}});
  // Rank 1 exits 0 early; ranks 0 and 2 must each see a CommError.
  for (int r : {0, 2}) {
    EXPECT_NE(o.output.find("rank " + std::to_string(r) + ": 1 checks passed, 0 failed"), std::string::npos)
        << o.output;
  }
  EXPECT_LT(o.seconds, 30.0);
}

TEST(Errors, APeerThatNeverArrivesIsNamedWithinTheTimeout) {
  // WORLD_SIZE says 3 but only 2 workers start.
  auto o = run_workers("join", 2, {{"WORLD_SIZE", "3"}, {"BAGUA_TIMEOUT_S", "3"}});
  EXPECT_FALSE(o.result.ok);
  EXPECT_NE(o.output.find("rendezvous timed out after 3 s: 2 of 3 ranks arrived; missing ranks [2]"),
            std::string::npos)
      << o.output;
  EXPECT_LT(o.seconds, 15.0) << "the timeout must bound the wait";
}

TEST(Errors, RankZeroMissingIsReportedByTheOthers) {
  auto o = run_workers("join", 1, {{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"BAGUA_TIMEOUT_S", "2"}});
  EXPECT_FALSE(o.result.ok);
  EXPECT_NE(o.output.find("could not reach the rendezvous store at 127.0.0.1:"), std::string::npos)
      << o.output;
  EXPECT_LT(o.seconds, 15.0);
}

TEST(Errors, AWorkerThatCrashesStopsTheOthersAndIsNamed) {
  auto o = run_workers("crash", 3);  // BAGUA_TIMEOUT_S=60: only the launcher can end it early
  ASSERT_FALSE(o.result.ok);
  ASSERT_TRUE(o.result.first_failure.has_value());
  EXPECT_EQ(o.result.first_failure->rank, 1);
  EXPECT_TRUE(o.result.first_failure->signaled);
  EXPECT_EQ(o.result.first_failure->status, SIGSEGV);
  EXPECT_NE(o.result.summary().find("SIGSEGV"), std::string::npos) << o.result.summary();
  EXPECT_LT(o.seconds, 20.0);
}

// The README's demo: `bagua launch` of examples/collectives on 4 workers.
TEST(Demo, CollectivesExampleRunsOnFourWorkers) {
  std::string out = "/tmp/bagua-demo-" + std::to_string(getpid());
  std::string cmd = std::string(BAGUA_CLI) + " launch --nproc-per-node 4 -- " + BAGUA_BINARY_DIR +
                    "/examples/collectives > " + out + " 2>&1";
  int code = std::system(cmd.c_str());
  std::string text = slurp(out);
  unlink(out.c_str());
  EXPECT_EQ(code, 0) << text;
  for (int r = 0; r < 4; ++r) {
    // sum over 4 ranks of [1, 2] + 2r = [16, 20]
    EXPECT_NE(text.find("[rank " + std::to_string(r) + "] allreduce int64"), std::string::npos) << text;
  }
  EXPECT_NE(text.find("-> [16, 20]"), std::string::npos) << text;
  EXPECT_NE(text.find("broadcast_object -> \"hello from rank 0\""), std::string::npos) << text;
}

// In this (runner) process: the environment checks need no peers.
TEST(Errors, MissingAndMalformedVariablesAreAllNamed) {
  unsetenv("RANK");
  setenv("WORLD_SIZE", "two", 1);
  unsetenv("MASTER_ADDR");
  setenv("MASTER_PORT", "70000", 1);
  try {
    bagua::init_process_group();
    FAIL() << "init_process_group accepted a broken environment";
  } catch (const bagua::ConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("RANK is not set"), std::string::npos) << m;
    EXPECT_NE(m.find("WORLD_SIZE='two' is not an integer"), std::string::npos) << m;
    EXPECT_NE(m.find("MASTER_ADDR is not set"), std::string::npos) << m;
    EXPECT_NE(m.find("MASTER_PORT=70000 is not a port"), std::string::npos) << m;
  }
  EXPECT_FALSE(bagua::is_initialized());
  unsetenv("WORLD_SIZE");
  unsetenv("MASTER_PORT");
}

TEST(Errors, RepeatedInitializationThrowsAndDestroyAllowsANewOne) {
  int port = bagua::find_free_port();
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  bagua::init_process_group();
  EXPECT_THROW(bagua::init_process_group(), bagua::RepeatedInitializationError);
  bagua::destroy_process_group();
  EXPECT_FALSE(bagua::is_initialized());
  setenv("MASTER_PORT", std::to_string(bagua::find_free_port()).c_str(), 1);
  bagua::init_process_group();
  at::Tensor x = at::ones({3});
  bagua::allreduce(x, bagua::ReduceOp::AVG);
  EXPECT_TRUE(at::equal(x, at::ones({3})));
  bagua::destroy_process_group();
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(v);
}

// destroy_process_group() then init_process_group() on every rank, one
// rank slow to leave each time (rank 0, which serves the store, among them).
TEST(Groups, EveryRankLeavesAndJoinsAgainWhileOneIsSlowToLeave) {
  expect_all_checks_passed(run_workers("rejoin", 2, {{"BAGUA_TIMEOUT_S", "30"}}), 2);
  expect_all_checks_passed(run_workers("rejoin", 3, {{"BAGUA_TIMEOUT_S", "30"}}), 3);
}

// A group handle kept across destroy_process_group() keeps rank 0's store
// on its port: joining again there says so.
TEST(Errors, AGroupHandleKeptAcrossDestroyIsNamedWhenRankZeroCannotServeAgain) {
  const int port = bagua::find_free_port();
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  bagua::init_process_group();
  bagua::ProcessGroupPtr kept = bagua::new_group({0});
  bagua::destroy_process_group();
  try {
    bagua::init_process_group();
    ADD_FAILURE() << "rank 0 served a second store on a port its first still holds";
  } catch (const bagua::CommError& e) {
    EXPECT_NE(std::string(e.what()).find("kept by a group handle this process still holds"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(bagua::is_initialized());
  kept.reset();
  bagua::init_process_group();  // the port is free once the handle is gone
  at::Tensor x = at::ones({2});
  bagua::allreduce(x);
  EXPECT_TRUE(at::equal(x, at::ones({2})));
  bagua::destroy_process_group();
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(v);
}

// The same with more than one rank: the others leave at once (rank 0 tells
// them its store stays up) and all join again once the handle is gone.
TEST(Errors, AGroupHandleKeptOnRankZeroDoesNotHoldTheOthersInDestroy) {
  for (int world : {2, 3}) {
    const std::string sync = ::testing::TempDir() + "/bagua-kept-" + std::to_string(::getpid()) + "-" +
                             std::to_string(world);
    std::remove(sync.c_str());
    expect_all_checks_passed(
        run_workers("kept_handle", world, {{"BAGUA_TIMEOUT_S", "60"}, {"BAGUA_TEST_SYNC_FILE", sync}}), world);
    std::remove(sync.c_str());
  }
}

TEST(Errors, CollectivesBeforeInitSayWhatToDo) {
  at::Tensor x = at::ones({2});
  try {
    bagua::allreduce(x);
    FAIL() << "allreduce without a process group did not throw";
  } catch (const bagua::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("init_process_group"), std::string::npos) << e.what();
  }
}

}  // namespace
