// End-to-end tests of `bagua run`: the real binary, real worker processes,
// the real Fashion-MNIST files and TorchScript models exported by Python.
#include <bagua/data.h>
#include <bagua/launch.h>

#include "support/bagua_run.h"
#include "support/python.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace fs = std::filesystem;

namespace {

using namespace bagua::testing;

std::string slurp(const fs::path& path) { return read_file(path); }

TEST_F(RunTest, TwoWorkersTrainLogCheckpointAndAgree) {
  std::string recipe = write_recipe("basic",
                                    "  # eval on the test set\n");
  // An eval set, added with --set to exercise overrides as well.
  RunOutcome r = bagua_run(recipe + " --set 'data.eval={format: idx, images: " + kFmnist +
                    "t10k-images-idx3-ubyte.gz, labels: " + kFmnist + "t10k-labels-idx1-ubyte.gz}'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::path out = dir_ / "basic";
  EXPECT_TRUE(fs::exists(out / "model.pt"));
  EXPECT_TRUE(fs::exists(out / "recipe.resolved.yaml"));
  EXPECT_TRUE(fs::exists(out / "logs" / "rank-0.log"));
  EXPECT_TRUE(fs::exists(out / "logs" / "rank-1.log"));
  EXPECT_FALSE(fs::exists(out / "tensorboard")) << "output.tensorboard is off by default";
  EXPECT_NE(r.output.find("final weights identical on all 2 workers"), std::string::npos) << r.output;
  auto records = metrics(out / "metrics.jsonl");
  int steps = 0, evals = 0;
  for (const auto& j : records) {
    if (j.contains("loss")) {
      ++steps;
      for (const char* k : {"step", "epoch", "loss", "lr", "samples_per_s", "time"}) EXPECT_TRUE(j.contains(k)) << j;
    }
    if (j.contains("eval_loss")) {
      ++evals;
      EXPECT_TRUE(j.contains("eval_accuracy")) << j;
      EXPECT_EQ(j["eval_samples"], 10000) << "eval covers the whole set once, across both ranks";
    }
  }
  EXPECT_EQ(steps, 6) << "24 steps logged every 4";
  EXPECT_EQ(evals, 1) << "max_steps ends the run inside the epoch: one final evaluation";
  // keep: 2 newest checkpoints (final one included).
  int checkpoints = 0;
  for (const auto& e : fs::directory_iterator(out / "checkpoints")) checkpoints += e.path().filename().string()[0] != '.';
  EXPECT_EQ(checkpoints, 2);
  auto params = model_parameters(out / "model.pt");
  EXPECT_EQ(params.size(), 4u);
}

TEST_F(RunTest, TwoWorkersAtBatchBEqualOneWorkerAtBatch2B) {
  std::string recipe = write_recipe("eq");
  RunOutcome two = bagua_run(recipe + " --set output.dir=" + (dir_ / "two").string());
  ASSERT_EQ(two.exit_code, 0) << two.output;
  RunOutcome one = bagua_run(recipe + " --nproc-per-node 1 --set data.batch_size=32 --set output.dir=" +
                      (dir_ / "one").string());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  double diff = max_abs_diff(model_parameters(dir_ / "two" / "model.pt"), model_parameters(dir_ / "one" / "model.pt"));
  EXPECT_LT(diff, 1e-5);
  // And training did something: the weights moved from the exported ones.
  EXPECT_GT(max_abs_diff(model_parameters(dir_ / "one" / "model.pt"),
                         model_parameters(kSource + "/tests/fixtures/models/mlp_small.pt")),
            1e-3);
}

TEST_F(RunTest, ACrashedRankIsReportedAndTheResumedRunEqualsAnUninterruptedOne) {
  std::string recipe = write_recipe("resume");
  RunOutcome clean = bagua_run(recipe + " --set output.dir=" + (dir_ / "clean").string());
  ASSERT_EQ(clean.exit_code, 0) << clean.output;

  auto t0 = std::chrono::steady_clock::now();
  RunOutcome crashed = bagua_run(recipe, "BAGUA_FAULT_AT_STEP=1:13");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(crashed.exit_code, 3) << crashed.output;
  EXPECT_NE(crashed.output.find("rank 1 (local rank 1) failed with signal 9 (SIGKILL)"), std::string::npos)
      << crashed.output;
  EXPECT_NE(crashed.output.find("BAGUA_FAULT_AT_STEP: rank 1 kills itself at step 13"), std::string::npos)
      << "the report shows the last lines of the failed rank's log:\n" << crashed.output;
  EXPECT_LT(seconds, 60.0);
  EXPECT_FALSE(fs::exists(dir_ / "resume" / "model.pt"));

  RunOutcome resumed = bagua_run(recipe);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("at step 8"), std::string::npos) << resumed.output;
  double diff = max_abs_diff(model_parameters(dir_ / "resume" / "model.pt"),
                             model_parameters(dir_ / "clean" / "model.pt"));
  EXPECT_EQ(diff, 0.0) << "a resumed run must end with exactly the uninterrupted run's weights";
}

// Runs `bagua run ARGS` as the 2 workers of a torchrun-style job (RANK,
// WORLD_SIZE, ... set for each), concurrently; `env_of(rank)` adds variables.
std::vector<RunOutcome> run_as_two_torchrun_workers(const fs::path& dir, const std::string& args,
                                                    const std::function<std::string(int)>& env_of) {
  int port = bagua::find_free_port();
  std::vector<std::thread> ranks;
  std::vector<RunOutcome> results(2);
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      std::string env = "RANK=" + std::to_string(rank) + " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(rank) +
                        " LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
                        " OMP_NUM_THREADS=1 " + env_of(rank);
      fs::path out = dir / ("rank" + std::to_string(rank) + ".out");
      int status = std::system((env + " " + BAGUA_CLI + " run " + args + " > " + out.string() + " 2>&1").c_str());
      results[rank].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      results[rank].output = slurp(out);
    });
  }
  for (auto& t : ranks) t.join();
  return results;
}

TEST_F(RunTest, MaxRestartsRestartsTheGroupFromTheLatestCheckpoint) {
  std::string recipe = write_recipe("restart", "");
  RunOutcome r = bagua_run(recipe + " --set distributed.max_restarts=1", "BAGUA_FAULT_AT_STEP=0:10");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("restarting all workers (1 of 1)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "restart" / "model.pt"));
  // Each attempt's logs are kept: the crash in attempt-0/, the rerun on top.
  const fs::path logs = dir_ / "restart" / "logs";
  EXPECT_NE(slurp((logs / "attempt-0" / "rank-0.log").string()).find("kills itself at step 10"), std::string::npos);
  const std::string latest = slurp((logs / "rank-0.log").string());
  EXPECT_EQ(latest.find("kills itself"), std::string::npos) << latest;
  EXPECT_NE(latest.find("resumed from"), std::string::npos) << latest;
}

// Workers of different restart attempts never meet: their rendezvous keys
// are scoped to TORCHELASTIC_RESTART_COUNT, so a rank left over from a
// previous attempt times out naming the missing ranks instead of joining.
TEST_F(RunTest, WorkersOfDifferentRestartAttemptsNeverMeet) {
  std::string recipe = write_recipe("attempts");
  auto results = run_as_two_torchrun_workers(dir_, recipe + " --set distributed.timeout_s=5", [](int rank) {
    return "TORCHELASTIC_RESTART_COUNT=" + std::to_string(rank);
  });
  EXPECT_NE(results[0].exit_code, 0) << results[0].output;
  EXPECT_NE(results[1].exit_code, 0) << results[1].output;
  EXPECT_NE(results[0].output.find("rendezvous timed out"), std::string::npos) << results[0].output;
  EXPECT_NE(results[0].output.find("missing ranks [1]"), std::string::npos) << results[0].output;
  EXPECT_FALSE(fs::exists(dir_ / "attempts" / "model.pt"));
}

// Under torch elastic's dynamic rendezvous (TORCHELASTIC_USE_AGENT_STORE=False:
// the store is the round's own) the agents' restart counts may differ: a
// node that joins starts at 0, one whose workers stopped for the
// membership change may have counted a failure. Those workers must meet.
TEST_F(RunTest, WorkersOfOneDynamicRendezvousRoundMeetWhateverTheirRestartCounts) {
  std::string recipe = write_recipe("dynamic");
  auto results = run_as_two_torchrun_workers(dir_, recipe + " --set train.max_steps=4", [](int rank) {
    return "TORCHELASTIC_USE_AGENT_STORE=False TORCHELASTIC_RESTART_COUNT=" + std::to_string(rank);
  });
  EXPECT_EQ(results[0].exit_code, 0) << results[0].output;
  EXPECT_EQ(results[1].exit_code, 0) << results[1].output;
  EXPECT_NE(results[0].output.find("final weights identical on all 2 workers"), std::string::npos) << results[0].output;
}

TEST_F(RunTest, ResumeNeverStartsAfreshWithoutMixingCheckpoints) {
  std::string recipe = write_recipe("never");
  ASSERT_EQ(bagua_run(recipe).exit_code, 0);  // leaves step-16 and step-24 (keep 2)
  RunOutcome r = bagua_run(recipe + " --set checkpoint.resume=never --set train.max_steps=8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("resumed from"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("moved the earlier run's checkpoints to"), std::string::npos) << r.output;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_ / "never" / "checkpoints")) names.push_back(e.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"step-00000008"}) << "only the new run's checkpoint";
}

TEST_F(RunTest, PythonExportedCnnWithBatchNormAndAnIgnoredParameterTrainsAndLoadsInPython) {
  std::string recipe = write_recipe("bn", "", "tests/fixtures/models/bn_cnn.pt");
  RunOutcome r = bagua_run(recipe + " --set 'model.ignore_params=[head.bias]' --set train.max_steps=10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::path model = dir_ / "bn" / "model.pt";
  std::string py = test_python() + " -c \"import torch; m = torch.jit.load('" + model.string() +
                   "'); m.eval(); y = m(torch.zeros(3, 784)); "
                   "print('shape', tuple(y.shape)); print('bn_mean_moved', bool(m.bn.running_mean.abs().sum() > 0))\"";
  FILE* p = popen(py.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[512];
  std::string text;
  while (fgets(buf, sizeof(buf), p)) text += buf;
  EXPECT_EQ(pclose(p), 0) << text;
  EXPECT_NE(text.find("shape (3, 10)"), std::string::npos) << text;
  EXPECT_NE(text.find("bn_mean_moved True"), std::string::npos) << text;
}

// Each rank's BatchNorm running statistics see only its own batches. The
// run's evaluation (each rank evaluating its share) and model.pt must use
// the same statistics: the ranks' average. So evaluating model.pt alone on
// the whole eval set gives the loss the run reported.
TEST_F(RunTest, BatchNormStatisticsAreTheSameInTheRunsEvaluationAndInModelPt) {
  std::string recipe = write_recipe("bnsync", "", "tests/fixtures/models/bn_cnn.pt");
  RunOutcome r = bagua_run(recipe + " --set train.max_steps=16 --set 'data.eval={format: idx, images: " + kFmnist +
                           "t10k-images-idx3-ubyte.gz, labels: " + kFmnist + "t10k-labels-idx1-ubyte.gz}'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  double reported = -1;
  for (const auto& j : metrics(dir_ / "bnsync" / "metrics.jsonl")) {
    if (j.contains("eval_loss")) reported = j["eval_loss"];
  }
  ASSERT_GT(reported, 0);

  torch::NoGradGuard no_grad;
  torch::jit::Module m = torch::jit::load((dir_ / "bnsync" / "model.pt").string());
  m.eval();
  bagua::DataSource eval;
  eval.images = kFmnist + "t10k-images-idx3-ubyte.gz";
  eval.labels = kFmnist + "t10k-labels-idx1-ubyte.gz";
  auto data = bagua::load_dataset(eval, bagua::TargetKind::kClassIndex);
  double loss_sum = 0;
  for (int64_t start = 0; start < data->size(); start += 500) {
    std::vector<int64_t> idx;
    for (int64_t i = start; i < std::min(data->size(), start + 500); ++i) idx.push_back(i);
    bagua::Batch b = data->get_batch(idx);
    at::Tensor out = m.forward({b.input}).toTensor();
    loss_sum += torch::nn::functional::cross_entropy(out, b.target).item<double>() * static_cast<double>(idx.size());
  }
  const double alone = loss_sum / static_cast<double>(data->size());
  EXPECT_NEAR(alone, reported, 1e-5 * reported) << "model.pt's statistics are not the ones the run evaluated with";
}

TEST_F(RunTest, RunsAsASingleWorkerWhenTorchrunVariablesAreSet) {
  std::string recipe = write_recipe("worker");
  auto results = run_as_two_torchrun_workers(dir_, recipe, [](int) { return std::string(); });
  EXPECT_EQ(results[0].exit_code, 0) << results[0].output;
  EXPECT_EQ(results[1].exit_code, 0) << results[1].output;
  EXPECT_NE(results[0].output.find("2 workers"), std::string::npos) << results[0].output;
  EXPECT_TRUE(fs::exists(dir_ / "worker" / "model.pt"));
  EXPECT_FALSE(fs::exists(dir_ / "worker" / "logs")) << "no launcher: no per-rank logs";
  EXPECT_EQ(results[0].output.find("LOCAL_WORLD_SIZE is not"), std::string::npos) << "torchrun sets it";
}

// A Kubernetes PyTorchJob (v1) pod without torchrun sets RANK and
// WORLD_SIZE (the number of pods) and no LOCAL_WORLD_SIZE: each pod is one
// worker, and a recipe that asks for 2 per node is told so, not quietly
// shrunk.
TEST_F(RunTest, APyTorchJobPodIsOneWorkerAndSaysSoWhenTheRecipeAsksForMore) {
  std::string recipe = write_recipe("pods");
  auto results = run_as_two_torchrun_workers(dir_, recipe, [](int) { return std::string("env -u LOCAL_WORLD_SIZE"); });
  EXPECT_EQ(results[0].exit_code, 0) << results[0].output;
  EXPECT_EQ(results[1].exit_code, 0) << results[1].output;
  EXPECT_NE(results[0].output.find("this process trains as 1 of WORLD_SIZE=2 workers, one per pod, and "
                                   "distributed.nproc_per_node (2) is not used"),
            std::string::npos)
      << results[0].output;
  EXPECT_TRUE(fs::exists(dir_ / "pods" / "model.pt"));
}

// An elastic job (--nnodes MIN:MAX) on one machine: with MIN nodes it
// trains; with fewer, its round waits distributed.timeout_s and fails,
// naming the nodes it has and how many more it needs. A malformed count is
// refused before anything starts.
TEST_F(RunTest, AnElasticJobTrainsWithMinNodesAndBelowMinNamesWhatIsMissing) {
  std::string recipe = write_recipe("range");
  const std::string port = std::to_string(bagua::find_free_port());
  RunOutcome alone = bagua_run(recipe + " --nnodes 2:3 --master-port " + port + " --set distributed.timeout_s=3");
  EXPECT_EQ(alone.exit_code, 3) << alone.output;
  EXPECT_NE(alone.output.find("this node serves its store on port " + port), std::string::npos) << alone.output;
  EXPECT_NE(alone.output.find("round 0 of the elastic job has 1 node (" + bagua::host_name() +
                              ") after 3 s, fewer than the 2 it needs"),
            std::string::npos)
      << alone.output;
  EXPECT_FALSE(fs::exists(dir_ / "range" / "logs" / "rank-0.log")) << "no worker started";
  // A scheduler's notice while it waits: it leaves, exit 75. (5 s: a start
  // slowed by a busy machine must still be waiting in the round by then.)
  RunOutcome noticed = bagua_run(recipe + " --nnodes 2:3 --master-port " + port, "timeout --preserve-status -s TERM 5");
  EXPECT_EQ(noticed.exit_code, 75) << noticed.output;
  EXPECT_NE(noticed.output.find("stopped by SIGTERM while waiting in round 0 of the elastic job; this node leaves"),
            std::string::npos)
      << noticed.output;
  for (const std::string bad : {"two", "3:2"}) {
    RunOutcome refused = bagua_run(recipe + " --nnodes " + bad);
    EXPECT_EQ(refused.exit_code, 2) << refused.output;
    EXPECT_NE(refused.output.find("--nnodes " + bad + ": expected"), std::string::npos) << refused.output;
  }
  for (const std::string& flags : {std::string("--rdzv-endpoint 127.0.0.1"),
                                   "--rdzv-endpoint 127.0.0.1:" + port + " --master-port " + port}) {
    RunOutcome refused = bagua_run(recipe + " --nnodes 2:3 " + flags);
    EXPECT_EQ(refused.exit_code, 2) << refused.output;
    EXPECT_NE(refused.output.find("--rdzv-endpoint"), std::string::npos) << refused.output;
  }
  RunOutcome one = bagua_run(recipe + " --nnodes 1:2 --rdzv-endpoint 127.0.0.1:" + port +
                             " --set train.max_steps=2 --set distributed.rdzv_last_call_s=1");
  EXPECT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("round 0: 1 node x 2 workers = 2 workers"), std::string::npos) << one.output;
  EXPECT_TRUE(fs::exists(dir_ / "range" / "model.pt")) << one.output;
}

// In an elastic job a failure ends its round, and the next round resumes
// from the newest checkpoint; such rounds count against
// distributed.max_restarts: with 1 the job survives one worker killed,
// with 0 it ends (exit 3) saying so.
TEST_F(RunTest, AnElasticJobsFailedRoundsCountAgainstMaxRestarts) {
  std::string recipe = write_recipe("rounds");
  const std::string elastic = " --nnodes 1:2 --master-port " + std::to_string(bagua::find_free_port()) +
                              " --set distributed.rdzv_last_call_s=1";
  RunOutcome survived = bagua_run(recipe + elastic + " --set distributed.max_restarts=1", "BAGUA_FAULT_AT_STEP=1:13");
  EXPECT_EQ(survived.exit_code, 0) << survived.output;
  EXPECT_NE(survived.output.find("round 0 failed (1 of 1 restarts): the nodes that remain go on from the newest "
                                 "checkpoint"),
            std::string::npos)
      << survived.output;
  EXPECT_NE(survived.output.find("round 1: 1 node x 2 workers = 2 workers"), std::string::npos) << survived.output;
  EXPECT_NE(survived.output.find("resumed from " + (dir_ / "rounds" / "checkpoints" / "step-00000008").string()),
            std::string::npos)
      << survived.output;
  EXPECT_TRUE(fs::exists(dir_ / "rounds" / "logs" / "attempt-0" / "rank-1.log")) << "round 0's logs kept";
  RunOutcome ended = bagua_run(recipe + elastic + " --set output.dir=" + (dir_ / "ended").string(),
                               "BAGUA_FAULT_AT_STEP=1:13");
  EXPECT_EQ(ended.exit_code, 3) << ended.output;
  EXPECT_NE(ended.output.find("round 0 failed, and distributed.max_restarts (0) rounds after failures have been spent"),
            std::string::npos)
      << ended.output;
}

TEST_F(RunTest, RunsAsASingleWorkerUnderSlurmVariables) {
  std::string recipe = write_recipe("slurm");
  int port = bagua::find_free_port();
  std::vector<std::thread> tasks;
  RunOutcome results[2];
  for (int task = 0; task < 2; ++task) {
    tasks.emplace_back([&, task] {
      std::string env = "env -u RANK -u WORLD_SIZE SLURM_PROCID=" + std::to_string(task) +
                        " SLURM_NTASKS=2 SLURM_STEP_ID=0 SLURM_TASKS_PER_NODE=2 SLURM_LOCALID=" +
                        std::to_string(task) + " SLURM_NODEID=0 SLURM_NNODES=1 MASTER_PORT=" + std::to_string(port) +
                        " OMP_NUM_THREADS=1";
      fs::path out = dir_ / ("task" + std::to_string(task) + ".out");
      int status = std::system((env + " " + BAGUA_CLI + " run " + recipe + " > " + out.string() + " 2>&1").c_str());
      results[task].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      results[task].output = slurp(out);
    });
  }
  for (auto& t : tasks) t.join();
  EXPECT_EQ(results[0].exit_code, 0) << results[0].output;
  EXPECT_EQ(results[1].exit_code, 0) << results[1].output;
  EXPECT_NE(results[0].output.find("final weights identical on all 2 workers"), std::string::npos)
      << results[0].output;
  EXPECT_TRUE(fs::exists(dir_ / "slurm" / "model.pt"));
  // The run records the world it ran in, not the recipe's one node of one
  // worker at 127.0.0.1 (issue 43, item 14).
  const YAML::Node resolved = YAML::LoadFile((dir_ / "slurm" / "recipe.resolved.yaml").string());
  EXPECT_EQ(resolved["distributed"]["nproc_per_node"].as<int>(), 2);
  EXPECT_EQ(resolved["distributed"]["nnodes"].as<int>(), 1);
}

// Slurm's batch script (or salloc's shell) has SLURM_PROCID=0 and the
// job's SLURM_NTASKS but no step: bagua run there was rank 0 of a world
// whose other tasks never start, and waited out distributed.timeout_s.
// It says what happened instead; an srun task whose peers never come
// exits 3, as the failure table says (it exited 1).
TEST_F(RunTest, SlurmsBatchScriptIsNotATaskAndAMissingPeerExits3) {
  const std::string recipe = write_recipe("batch");
  const std::string slurm = "env -u RANK -u WORLD_SIZE SLURM_JOB_ID=42 SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_NODEID=0 ";
  const auto t0 = std::chrono::steady_clock::now();
  RunOutcome batch = bagua_run(recipe + " --set distributed.timeout_s=120", slurm);
  EXPECT_EQ(batch.exit_code, 2) << batch.output;
  EXPECT_NE(batch.output.find("this is Slurm job 42's batch script (or salloc shell), not one of its 2 tasks"),
            std::string::npos)
      << batch.output;
  EXPECT_NE(batch.output.find("srun --kill-on-bad-exit=1 bagua run"), std::string::npos) << batch.output;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60)) << "not after timeout_s";
  RunOutcome alone = bagua_run(recipe + " --set distributed.timeout_s=3",
                               slurm + "SLURM_STEP_ID=0 MASTER_PORT=" + std::to_string(bagua::find_free_port()));
  EXPECT_EQ(alone.exit_code, 3) << alone.output;
  EXPECT_NE(alone.output.find("rendezvous timed out"), std::string::npos) << alone.output;
}

TEST_F(RunTest, SigtermStopsAfterACheckpointAndTheSameCommandResumes) {
  std::string recipe = write_recipe("stop");
  fs::path out = dir_ / "stop.out";
  std::string cmd = std::string(BAGUA_CLI) + " run " + recipe +
                    " --set train.max_steps=100000 --set train.log_every_steps=2 > " + out.string() + " 2>&1";
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until training has logged a few steps, then ask it to stop.
  fs::path metrics_file = dir_ / "stop" / "metrics.jsonl";
  for (int i = 0; i < 600 && metrics(metrics_file).size() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GE(metrics(metrics_file).size(), 3u) << slurp(out);
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  std::string text = slurp(out);
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 75) << "SIGTERM is a preemption\n" << text;
  EXPECT_NE(text.find("stopped by a signal at step"), std::string::npos) << text;
  EXPECT_NE(text.find("preempted; run the same command to resume from the checkpoint just written (exit 75)"),
            std::string::npos) << text;
  auto records = metrics(metrics_file);
  int64_t logged = records.back()["step"];
  RunOutcome resumed = bagua_run(recipe + " --set train.max_steps=" + std::to_string(logged + 6) +
                          " --set train.log_every_steps=2");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
}

// Processes (pid, parent pid) whose command line mentions `needle`.
std::vector<std::pair<pid_t, pid_t>> processes_mentioning(const std::string& needle) {
  std::vector<std::pair<pid_t, pid_t>> found;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = slurp((entry.path() / "cmdline").string());
    if (cmdline.find(needle) == std::string::npos) continue;
    std::string stat = slurp((entry.path() / "stat").string());  // pid (comm) state ppid ...
    pid_t ppid = 0;
    if (auto close = stat.rfind(')'); close != std::string::npos) {
      std::istringstream rest(stat.substr(close + 2));
      char state = 0;
      rest >> state >> ppid;
      if (state == 'Z') continue;
    }
    found.emplace_back(static_cast<pid_t>(std::stoi(name)), ppid);
  }
  return found;
}

// A learning rate raised far too high sends the loss back to chance (2.3
// for 10 classes) after it had fallen: the run still exits 0, as the recipe asked,
// but never without a word: the records are flagged and the log warns.
TEST_F(RunTest, ALossThatClimbsBackToChanceIsFlaggedNotSilent) {
  // lr 0.05 for 120 steps (it learns), then 50 times that.
  RunOutcome r = bagua_run(write_recipe("diverge") + " --set 'scheduler={type: step, step_size: 120, gamma: 50}'"
                           " --set train.max_steps=240 --set train.log_every_steps=20"
                           " --set checkpoint.every_steps=null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("WARNING: the training loss is diverging: step "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("WARNING: this run's training loss diverged"), std::string::npos) << r.output;
  int flagged = 0;
  for (const auto& j : metrics(dir_ / "diverge" / "metrics.jsonl")) flagged += j.value("diverging", false) ? 1 : 0;
  EXPECT_GE(flagged, 2) << r.output;

  // (and glibc's own malloc, said once)
  RunOutcome calm = bagua_run(write_recipe("calm") + " --set train.max_steps=240 --set train.log_every_steps=20"
                              " --set train.allocator=system");
  ASSERT_EQ(calm.exit_code, 0) << calm.output;
  EXPECT_NE(calm.output.find("malloc: system (train.allocator)"), std::string::npos) << calm.output;
  EXPECT_EQ(r.output.find("malloc:"), std::string::npos) << "tuned, the default, goes without a word\n" << r.output;
  EXPECT_EQ(calm.output.find("diverg"), std::string::npos) << calm.output;
  for (const auto& j : metrics(dir_ / "calm" / "metrics.jsonl")) EXPECT_FALSE(j.contains("diverging")) << j.dump();
}

// Async ranks read a stop at different steps: they must agree on one, so
// the checkpoint holds every rank's file (issue 26: each rank saved its own
// step, meta.json listed a rank-1.pt that was elsewhere, and the resume
// went on silently with rank 0's state for rank 1). Evaluations and
// checkpoints every few steps give the ranks collectives to meet at.
TEST_F(RunTest, Sigusr1UnderAsyncStopsEveryRankAtOneStepWithAllRankFiles) {
  std::string recipe = write_recipe("async_stop");
  const std::string sets =
      " --set 'algorithm={name: async, sync_interval_ms: 5}' --set train.log_every_steps=2"
      " --set 'data.eval={format: idx, images: " + kFmnist + "t10k-images-idx3-ubyte.gz, labels: " + kFmnist +
      "t10k-labels-idx1-ubyte.gz}' --set train.eval_every=5 --set checkpoint.every_steps=7";
  fs::path out = dir_ / "async_stop.out";
  pid_t pid = start_bagua_run(recipe + sets + " --set train.max_steps=100000", out);
  fs::path metrics_file = dir_ / "async_stop" / "metrics.jsonl";
  for (int i = 0; i < 600 && metrics(metrics_file).size() < 12; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GE(metrics(metrics_file).size(), 12u) << slurp(out);
  kill(pid, SIGUSR1);  // Slurm's --signal=USR1@N
  int status = 0;
  waitpid(pid, &status, 0);
  std::string text = slurp(out);
  ASSERT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 75) << text;
  ASSERT_NE(text.find("stopped by a signal at step"), std::string::npos) << text;
  fs::path newest;
  for (const auto& e : fs::directory_iterator(dir_ / "async_stop" / "checkpoints")) {
    const std::string name = e.path().filename().string();
    EXPECT_EQ(name.rfind(".step-", 0), std::string::npos) << "a leftover " << name << "\n" << text;
    if (name.rfind("step-", 0) == 0 && (newest.empty() || name > newest.filename().string())) newest = e.path();
  }
  ASSERT_FALSE(newest.empty()) << text;
  auto meta = nlohmann::json::parse(slurp((newest / "meta.json").string()));
  for (const char* file : {"rank-0.pt", "rank-1.pt"}) {
    EXPECT_TRUE(meta["files"].contains(file)) << meta.dump();
    EXPECT_TRUE(fs::exists(newest / file)) << file << " of " << newest << "\n" << text;
  }
  const int64_t step = meta["step"];
  RunOutcome resumed = bagua_run(recipe + sets + " --set train.max_steps=" + std::to_string(step + 6));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + newest.string()), std::string::npos) << resumed.output;
  EXPECT_EQ(resumed.output.find("WARNING: checkpoint"), std::string::npos) << resumed.output;
  EXPECT_EQ(resumed.output.find("did not finish writing"), std::string::npos) << resumed.output;
}


// One run per output directory: a second is refused, naming the first; and
// the workers die with their supervisor, even one killed outright.
TEST_F(RunTest, AnOutputDirectoryHasOneRunAndWorkersDieWithTheirSupervisor) {
  std::string recipe = write_recipe("locked");
  const std::string out_dir = (dir_ / "locked").string();
  pid_t pid = start_bagua_run(recipe + " --set train.max_steps=100000", dir_ / "first.out");
  fs::path metrics_file = dir_ / "locked" / "metrics.jsonl";
  for (int i = 0; i < 600 && metrics(metrics_file).size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GE(metrics(metrics_file).size(), 2u) << slurp(dir_ / "first.out");
  int workers = 0;
  for (const auto& [p, parent] : processes_mentioning(recipe)) workers += parent == pid;
  EXPECT_EQ(workers, 2);

  RunOutcome second = bagua_run(recipe + " --set train.max_steps=100000");
  EXPECT_EQ(second.exit_code, 2) << second.output;
  EXPECT_NE(second.output.find("is in use by another run (bagua run, pid " + std::to_string(pid)), std::string::npos)
      << second.output;

  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  auto left = processes_mentioning(recipe);
  for (int i = 0; i < 50 && !left.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    left = processes_mentioning(recipe);
  }
  EXPECT_TRUE(left.empty()) << left.size() << " worker(s) of a killed `bagua run` still alive after 5 s";
  for (const auto& [p, parent] : left) kill(p, SIGKILL);

  // The directory is free again: a run starts (and resumes from the first's checkpoint).
  RunOutcome third = bagua_run(recipe + " --set train.max_steps=2");
  EXPECT_EQ(third.output.find("in use by another run"), std::string::npos) << third.output;
}

// distributed.master_port in the recipe is the port used, also on one node:
// with that port taken, the run fails naming it (before, a free port was
// silently used instead).
TEST_F(RunTest, MasterPortFromTheRecipeIsUsedOnOneNode) {
  int port = bagua::find_free_port();
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  std::string recipe = write_recipe("port");
  RunOutcome r = bagua_run(recipe + " --set distributed.master_port=" + std::to_string(port) +
                           " --set distributed.timeout_s=20 --set train.max_steps=2");
  ::close(fd);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot serve the rendezvous on port " + std::to_string(port)), std::string::npos)
      << r.output;
}

// model.ignore_params matching every parameter used to crash after training
// (nothing to compare at the end); it trains, says so and saves a model.
TEST_F(RunTest, IgnoringEveryParameterTrainsAndSavesAModel) {
  RunOutcome r = bagua_run(write_recipe("ignore_all") + " --set 'model.ignore_params=[\"*\"]'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("matches every parameter: each worker trained its own model"), std::string::npos)
      << r.output;
  EXPECT_FALSE(model_parameters(dir_ / "ignore_all" / "model.pt").empty());
}

// data.sampler.drop_last drops only the tail that does not divide across
// the workers (PyTorch's DistributedSampler): each worker's last, smaller
// batch still trains. 60000 samples on 2 workers, batch 7: 4286 steps.
TEST_F(RunTest, DropLastKeepsEachWorkersLastPartialBatch) {
  RunOutcome r = bagua_run(write_recipe("drop_last") +
                           " --set data.batch_size=7 --set data.sampler.drop_last=true --set train.max_steps=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("4286 steps per epoch of batch 7"), std::string::npos) << r.output;
}

// A NaN loss on one rank (injected at step 11) stops the run under the
// default on_nonfinite: stop, naming step, rank and samples, with exit 4,
// the earlier checkpoint kept, nothing saved after and no model.pt.
TEST_F(RunTest, ANonFiniteLossStopsNamingStepRankAndSamples) {
  RunOutcome r = bagua_run(write_recipe("nan_stop") + " --set distributed.max_restarts=2 --set train.device=cpu",
                           "BAGUA_NAN_AT_STEP=1:10");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  // Both ranks find the NaN (the averaged gradient); both name rank 1.
  EXPECT_NE(r.output.find("the training diverged at step 11 (epoch 1): the loss was nan on rank 1, which made"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("The batch of rank 1 held training samples ["), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("on rank 0"), std::string::npos) << r.output;
  // Those are rank 1's samples of its 11th batch (shuffled, seed 0, batch 16).
  bagua::DistributedSampler rank1(60000, 2, 1, true, 0, false);
  const auto batch = bagua::make_batches(rank1.indices(), 16, false).at(10);
  std::string first = "[" + std::to_string(batch[0]) + ", " + std::to_string(batch[1]) + ", ";
  EXPECT_NE(r.output.find("held training samples " + first), std::string::npos) << first << "\n" << r.output;
  EXPECT_NE(r.output.find("not restarting"), std::string::npos) << r.output;
  const fs::path out = dir_ / "nan_stop";
  EXPECT_TRUE(fs::exists(out / "checkpoints" / "step-00000008")) << r.output;
  EXPECT_FALSE(fs::exists(out / "checkpoints" / "step-00000016"));
  EXPECT_FALSE(fs::exists(out / "model.pt"));
}

// The compressed algorithms keep the same contract: a NaN on rank 1 (of 4,
// two simulated nodes' worth on one, hierarchical) stops with exit 4 naming
// rank 1, not the node leader that sent the compressed chunk, and
// skip_step skips the step on every rank and finishes.
TEST_F(RunTest, ByteGradAndQAdamStopOrSkipANonFiniteStepAsGradientAllReduceDoes) {
  const std::string four = " --set distributed.nproc_per_node=4 --set train.device=cpu --set train.max_steps=12";
  RunOutcome stop = bagua_run(write_recipe("bytegrad_nan_stop") + four + " --set algorithm.name=bytegrad"
                                  " --set algorithm.hierarchical=false",
                              "BAGUA_NAN_AT_STEP=1:6");
  EXPECT_EQ(stop.exit_code, 4) << stop.output;
  EXPECT_NE(stop.output.find("the loss was nan on rank 1, which made every rank's averaged gradient non-finite"),
            std::string::npos) << stop.output;
  RunOutcome skip = bagua_run(write_recipe("qadam_nan_skip") + four +
                                  " --set algorithm.name=qadam"
                                  " --set 'optimizers=[{type: qadam, lr: 0.001, warmup_steps: 3}]'"
                                  " --set train.on_nonfinite=skip_step",
                              "BAGUA_NAN_AT_STEP=1:8");
  ASSERT_EQ(skip.exit_code, 0) << skip.output;
  EXPECT_NE(skip.output.find("skipped that optimizer step on every worker (1 so far"), std::string::npos)
      << skip.output;
  EXPECT_NE(skip.output.find("final weights identical on all 4 workers"), std::string::npos) << skip.output;
}

// GPU machines only: on a GPU the verdict is recorded on the GPU and read
// at log records and checkpoints, so the run stops by the next one (step 12
// here, logged every 4), still with exit 4 naming the step and the rank, no
// later checkpoint and no model.pt.
TEST_F(RunTest, ANonFiniteLossStopsTheRunOnTheGpuToo) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible (or a CPU build of LibTorch)";
  RunOutcome r = bagua_run(write_recipe("nan_gpu") + " --set train.device=cuda", "BAGUA_NAN_AT_STEP=1:10");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("the training diverged at step 11: the loss was NaN or infinite on rank 1"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("here after step 12"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "nan_gpu" / "checkpoints" / "step-00000008")) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "nan_gpu" / "checkpoints" / "step-00000016"));
  EXPECT_FALSE(fs::exists(dir_ / "nan_gpu" / "model.pt"));
}

// Under on_nonfinite: skip_step the same NaN skips that step on both ranks
// alike: the run ends, the weights are finite and identical, and
// metrics.jsonl counts the skip.
TEST_F(RunTest, SkipStepSkipsANonFiniteStepOnEveryRank) {
  RunOutcome r = bagua_run(write_recipe("nan_skip") + " --set train.on_nonfinite=skip_step", "BAGUA_NAN_AT_STEP=1:10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("skipped that optimizer step on every worker (1 so far"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("final weights identical on all 2 workers"), std::string::npos) << r.output;
  auto records = metrics(dir_ / "nan_skip" / "metrics.jsonl");
  ASSERT_FALSE(records.empty());
  int64_t skips = -1;
  for (const auto& j : records) {
    if (j.contains("nonfinite_skips")) skips = j["nonfinite_skips"];
    if (j.contains("loss")) {
      EXPECT_TRUE(std::isfinite(j["loss"].get<double>())) << j.dump();
    }
  }
  EXPECT_EQ(skips, 1);
  for (const auto& p : model_parameters(dir_ / "nan_skip" / "model.pt")) EXPECT_TRUE(p.isfinite().all().item<bool>());
}

// A resume whose batches would differ from the checkpoint's run (here the
// batch size and the sampler's seed) is refused, naming each change, unless
// checkpoint.allow_data_change says so.
// async ranks decide alone whether to skip: the skipped step must still
// end the step the averaging thread waits for, or the run hangs.
TEST_F(RunTest, AsyncSkipsANonFiniteStepWithoutHanging) {
  RunOutcome r = bagua_run(write_recipe("async_skip") +
                               " --set train.on_nonfinite=skip_step --set algorithm.name=async"
                               " --set algorithm.sync_interval_ms=5 --set distributed.timeout_s=60",
                           "BAGUA_NAN_AT_STEP=1:10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("done: 24 steps"), std::string::npos) << r.output;
  for (const auto& p : model_parameters(dir_ / "async_skip" / "model.pt")) EXPECT_TRUE(p.isfinite().all().item<bool>());
}

TEST_F(RunTest, AResumeThatWouldChangeTheBatchesIsRefusedNamingTheChanges) {
  std::string recipe = write_recipe("changed");
  ASSERT_EQ(bagua_run(recipe + " --set train.max_steps=8").exit_code, 0);
  const std::string changes = " --set data.batch_size=8 --set data.sampler.seed=5 --set train.max_steps=12";
  RunOutcome refused = bagua_run(recipe + changes);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("would silently change what the saved position in the epoch means"),
            std::string::npos) << refused.output;
  // Another batch size alone is not a change of meaning: the resume
  // re-shards from the saved position (tests/train/resize_test.cpp).
  EXPECT_EQ(refused.output.find("data.batch_size"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("data.sampler.seed: 0 in the checkpoint, 5 now"), std::string::npos) << refused.output;
  RunOutcome allowed = bagua_run(recipe + changes + " --set checkpoint.allow_data_change=true");
  EXPECT_EQ(allowed.exit_code, 0) << allowed.output;
  EXPECT_NE(allowed.output.find("resumed from"), std::string::npos) << allowed.output;
}

// JSONL inputs are typed per file: an eval file whose numbers are all whole
// (read as int64 token ids) used to crash the first evaluation of a model
// trained on float vectors, an epoch in. Its inputs are now cast to the
// training set's float32; the reverse is refused before training.
TEST_F(RunTest, AnIntegerOnlyJsonlEvalFileFeedsAFloatModel) {
  auto write_jsonl = [&](const fs::path& path, int rows, bool whole) {
    std::ofstream out(path);
    for (int r = 0; r < rows; ++r) {
      out << "{\"x\": [";
      for (int i = 0; i < 49; ++i) out << (i ? ", " : "") << (whole ? std::to_string((r + i) % 2) : std::to_string(((r * 7 + i) % 10) / 10.0 + 0.05));
      out << "], \"y\": " << r % 10 << "}\n";
    }
  };
  write_jsonl(dir_ / "train.jsonl", 96, false);
  write_jsonl(dir_ / "eval.jsonl", 20, true);
  fs::path recipe = dir_ / "jsonl.yaml";
  std::ofstream(recipe) << "name: jsonl\n"
                        << "model: {torchscript: " << kSource << "/recipes/models/mlp49.pt, loss: cross_entropy}\n"
                        << "data:\n"
                        << "  train: {format: jsonl, path: " << (dir_ / "train.jsonl").string()
                        << ", input_field: x, target_field: y}\n"
                        << "  eval: {format: jsonl, path: " << (dir_ / "eval.jsonl").string()
                        << ", input_field: x, target_field: y}\n"
                        << "  batch_size: 16\n"
                        << "optimizers: [{type: sgd, lr: 0.05}]\n"
                        << "distributed: {nproc_per_node: 2}\n"
                        << "output: {dir: " << (dir_ / "jsonl").string() << "}\n";
  RunOutcome r = bagua_run(recipe.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(inputs cast to Float, as data.train's)"), std::string::npos) << r.output;
  EXPECT_GE(final_accuracy(dir_ / "jsonl" / "metrics.jsonl"), 0.0) << r.output;

  // The other way round (token ids to train, floats to evaluate): refused up front.
  RunOutcome reversed = bagua_run(recipe.string() + " --set data.train.path=" + (dir_ / "eval.jsonl").string() +
                                  " --set data.eval.path=" + (dir_ / "train.jsonl").string() +
                                  " --set output.dir=" + (dir_ / "reversed").string());
  EXPECT_EQ(reversed.exit_code, 2) << reversed.output;
  EXPECT_NE(reversed.output.find("data.eval's inputs are Float but data.train's are Long"), std::string::npos)
      << reversed.output;
  EXPECT_FALSE(fs::exists(dir_ / "reversed" / "metrics.jsonl"));
}

// The README's main job: the quickstart recipe as shipped reaches at least
// 85% test accuracy within its default epochs.
TEST_F(RunTest, QuickstartRecipeReaches85PercentTestAccuracy) {
  RunOutcome r = bagua_run(kSource + "/recipes/fashion-mnist-mlp.yaml --set output.dir=" + (dir_ / "quick").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  double accuracy = -1;
  for (const auto& j : metrics(dir_ / "quick" / "metrics.jsonl")) {
    if (j.contains("eval_accuracy")) accuracy = j["eval_accuracy"];
  }
  EXPECT_GE(accuracy, 0.85) << r.output;
}

// Bad data fails in the launcher, before any worker starts, naming file and place.
TEST_F(RunTest, BadDataIsReportedBeforeAnyWorkerStarts) {
  fs::path csv = dir_ / "ragged.csv";
  std::ofstream(csv) << "a,b,label\n1,2,0\n3,4\n5,6,1\n";
  std::string recipe = write_recipe("bad");
  RunOutcome r = bagua_run(recipe + " --set 'data.train={format: csv, path: " + csv.string() + ", target_column: label}'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("ragged.csv:3"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "bad" / "logs")) << "no worker may have started";
}

// data.cache, once refused here, runs now: tests/store/cache_run_test.cpp
// (an unreachable cache host is a user error before any worker starts).

// A CPU build, or a machine without a GPU: asking for one is a clear user
// error before any training starts.
TEST_F(RunTest, DeviceCudaWithoutAGpuIsAClearUserError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is visible here";
  RunOutcome r = bagua_run(write_recipe("nogpu") + " --set train.device=cuda");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("train.device is cuda, but"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "nogpu" / "model.pt"));
}

TEST_F(RunTest, CpuDeviceWithNcclIsARecipeError) {
  RunOutcome r = bagua_run(write_recipe("cpunccl") + " --set train.device=cpu --set distributed.backend=nccl");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("backend nccl needs the workers on GPUs"), std::string::npos) << r.output;
}

// GPU machines only (scripts/gpu-check.sh; CI has no GPU): the quickstart on
// the GPU, one worker over NCCL or two workers sharing the GPU over Gloo,
// reaches the CPU run's accuracy (85%), the weights identical, and model.pt
// holds host tensors.
void quickstart_on_the_gpu(const fs::path& dir, int nproc) {
  fs::path out = dir / ("gpu" + std::to_string(nproc));
  RunOutcome r = bagua_run(kSource + "/recipes/fashion-mnist-mlp.yaml --nproc-per-node " + std::to_string(nproc) +
                           " --set train.device=cuda --set output.dir=" + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string backend = nproc == 1 ? "nccl" : "gloo";
  EXPECT_NE(r.output.find("on GPUs (rank 0 on cuda:0) over " + backend), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("final weights identical"), std::string::npos) << r.output;
  double accuracy = -1;
  for (const auto& j : metrics(out / "metrics.jsonl")) {
    if (j.contains("eval_accuracy")) accuracy = j["eval_accuracy"];
  }
  EXPECT_GE(accuracy, 0.85) << r.output;
  for (const auto& p : model_parameters(out / "model.pt")) EXPECT_TRUE(p.is_cpu());
}

// (Two tests, run side by side: each takes about 100 s on an H200.)
TEST_F(RunTest, QuickstartOnTheGpuOverNccl) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible (or a CPU build of LibTorch)";
  quickstart_on_the_gpu(dir_, 1);
}

TEST_F(RunTest, QuickstartOnTheGpuSharedOverGloo) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible (or a CPU build of LibTorch)";
  quickstart_on_the_gpu(dir_, 2);
}

}  // namespace
