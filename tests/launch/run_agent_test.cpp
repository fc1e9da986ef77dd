// The run agent's pure parts (bagua/run_agent.h): the restart policy on
// every kind of attempt and membership change, how a process knows what it was started as, the
// Slurm task layout, and torchrun's PET_* defaults. No process is started here.
#include <bagua/errors.h>
#include <bagua/exit_codes.h>
#include <bagua/run_agent.h>

#include "launch/slurm_hostlist.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

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
  interrupted.interrupt_signal = SIGINT;
  const auto d = bagua::decide_after_attempt(interrupted, 0, 5);
  EXPECT_EQ(d.action, Action::kFinish);
  EXPECT_EQ(d.reason, Reason::kInterrupted);
  EXPECT_EQ(d.exit_code, bagua::kExitInterrupted);
}

// A scheduler's notice to the agent (SIGTERM, SIGUSR1) is a preemption,
// exit 75, whatever the workers it stopped exit with; a worker that got it
// directly (a torchrun or Slurm worker, or a signal to its process group)
// makes its node's run exit 75 too, never restarted.
TEST(RestartPolicy, PreemptionNoticesFinishWith75) {
  for (int sig : {SIGTERM, SIGUSR1}) {
    bagua::LaunchResult r = failed(bagua::kExitPreempted);
    r.workers = {*r.first_failure};
    r.interrupted = true;
    r.interrupt_signal = sig;
    const auto d = bagua::decide_after_attempt(r, 0, 5);
    EXPECT_EQ(d.reason, Reason::kInterrupted) << sig;
    EXPECT_EQ(d.exit_code, bagua::kExitPreempted) << sig;
  }
  bagua::LaunchResult ctrl_c = failed(bagua::kExitPreempted);  // the agent stops its workers with SIGTERM
  ctrl_c.workers = {*ctrl_c.first_failure};
  ctrl_c.interrupted = true;
  ctrl_c.interrupt_signal = SIGINT;
  EXPECT_EQ(bagua::decide_after_attempt(ctrl_c, 0, 5).exit_code, bagua::kExitInterrupted);
  bagua::LaunchResult direct = failed(bagua::kExitInterrupted);
  bagua::WorkerExit noticed = *direct.first_failure;
  noticed.rank = 0;
  noticed.status = bagua::kExitPreempted;
  direct.workers = {noticed, *direct.first_failure};
  const auto d = bagua::decide_after_attempt(direct, 0, 5);
  EXPECT_EQ(d.action, Action::kFinish);
  EXPECT_EQ(d.reason, Reason::kStoppedByAgreement);
  EXPECT_EQ(d.exit_code, bagua::kExitPreempted);
}

// A fixed-size job is a rendezvous whose membership never changes: the
// membership policy gives the failure policy's decision back, whatever
// the round's result says of other nodes.
TEST(MembershipPolicy, AFixedSizeJobsDecisionIsTheFailurePolicys) {
  const bagua::MembershipNews fixed;  // can_change false
  bagua::LaunchResult stopped = failed(bagua::kExitInterrupted);
  stopped.stopped_for = "a node waits";
  for (const auto& r : {stopped, failed(1), failed(bagua::kExitInterrupted), failed(bagua::kExitInvalidInput)}) {
    for (int attempt : {0, 3}) {
      const auto a = bagua::decide_after_attempt(r, attempt, 3);
      const auto d = bagua::decide_after_round(r, a, fixed);
      EXPECT_EQ(d.action, a.action);
      EXPECT_EQ(d.reason, a.reason);
      EXPECT_EQ(d.exit_code, a.exit_code);
    }
  }
}

// In an elastic job a membership change starts the next round, which does
// not count against max_restarts; a failure with no node joining still
// does, and what would fail again, a success or this node's interrupt end
// the run as in a fixed-size job.
TEST(MembershipPolicy, AnElasticJobsMembershipChangesStartTheNextRoundUncounted) {
  bagua::MembershipNews news;
  news.can_change = true;
  auto round = [&](const bagua::LaunchResult& r, int failures) {
    return bagua::decide_after_round(r, bagua::decide_after_attempt(r, failures, 1), news);
  };
  // A node waits to join: the workers stopped at a step (they exit 75).
  bagua::LaunchResult waiting = failed(bagua::kExitPreempted);
  waiting.stopped_for = "node-2 is waiting in round 1";
  EXPECT_EQ(round(waiting, 1).reason, Reason::kNodeWaiting);
  EXPECT_EQ(round(waiting, 1).action, Action::kRestart);
  bagua::LaunchResult left = waiting;  // ... but this node got a signal meanwhile: it leaves
  left.interrupted = true;
  left.interrupt_signal = SIGTERM;
  EXPECT_EQ(round(left, 0).reason, Reason::kInterrupted);
  EXPECT_EQ(round(left, 0).exit_code, bagua::kExitPreempted);
  // Stopped together at another node's request.
  const auto other = round(failed(bagua::kExitInterrupted), 0);
  EXPECT_EQ(other.reason, Reason::kOtherNodeStopped);
  EXPECT_EQ(other.action, Action::kRestart);
  // A failure: counted, unless a node joined (restarts spent or not).
  EXPECT_EQ(round(failed(1), 0).reason, Reason::kRestartable);
  EXPECT_EQ(round(failed(1), 1).reason, Reason::kRestartsExhausted);
  news.newcomers = {"node-3"};
  EXPECT_EQ(round(failed(1), 0).reason, Reason::kNodeJoined);
  EXPECT_EQ(round(failed(1), 1).reason, Reason::kNodeJoined);
  EXPECT_EQ(round(failed(1), 1).action, Action::kRestart);
  // A failure as a node of the round was lost (it left, or its keep-alive
  // lapsed): the survivors go on, even with every restart spent.
  news.newcomers.clear();
  news.lost = {"node-1"};
  EXPECT_EQ(round(failed(1), 1).reason, Reason::kNodeLost);
  EXPECT_EQ(round(failed(9, /*signaled=*/true), 0).action, Action::kRestart);
  EXPECT_EQ(bagua::decide_after_round(failed(1), bagua::decide_after_attempt(failed(1), 0, 0), news).reason,
            Reason::kNodeLost)
      << "max_restarts: 0 too";
  // Bad input fails again whoever joins or leaves; a success is a success.
  EXPECT_EQ(round(failed(bagua::kExitInvalidInput), 0).reason, Reason::kWouldFailAgain);
  bagua::LaunchResult ok;
  ok.ok = true;
  EXPECT_EQ(round(ok, 0).reason, Reason::kSucceeded);
  EXPECT_EQ(round(ok, 0).exit_code, bagua::kExitOk);
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
  for (const char* v : {"RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_ID", "SLURM_STEPID"}) {
    unsetenv(v);
  }
  EXPECT_EQ(bagua::started_as(), bagua::StartedAs::kAgent);
  Env env;
  env.set("SLURM_PROCID", "0");
  env.set("SLURM_NTASKS", "4");
  EXPECT_EQ(bagua::started_as(), bagua::StartedAs::kSlurmBatchShell) << "sbatch's script: no step";
  env.set("SLURM_PROCID", "3");
  env.set("SLURM_STEP_ID", "0");
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

// The forms Slurm prints in SLURM_JOB_NODELIST (as `scontrol show
// hostnames` expands them), and the malformed ones, refused by name.
TEST(SlurmHostList, ExpandsEveryFormSlurmPrints) {
  using bagua::launch::expand_slurm_hostlist;
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_slurm_hostlist("node7"), V{"node7"});
  EXPECT_EQ(expand_slurm_hostlist("node[01-03,07]"), (V{"node01", "node02", "node03", "node07"}));
  EXPECT_EQ(expand_slurm_hostlist("node[9-11]"), (V{"node9", "node10", "node11"}));
  EXPECT_EQ(expand_slurm_hostlist("n[098-101]"), (V{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand_slurm_hostlist("gpu-a[1-2]-ib,login1"), (V{"gpu-a1-ib", "gpu-a2-ib", "login1"}));
  EXPECT_EQ(expand_slurm_hostlist("rack[1-2]-n[8-9]"), (V{"rack1-n8", "rack1-n9", "rack2-n8", "rack2-n9"}));
  EXPECT_EQ(expand_slurm_hostlist("a[1],b[2-3],c"), (V{"a1", "b2", "b3", "c"}));
  EXPECT_EQ(expand_slurm_hostlist("cn-0[0-1].cluster.org"), (V{"cn-00.cluster.org", "cn-01.cluster.org"}));
  for (const char* bad : {"", "node[1-3", "node1-3]", "node[3-1]", "node[a-b]", "a,,b", "node[[1]]", "a b",
                          "node[1-200000]"}) {
    try {
      expand_slurm_hostlist(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const bagua::Error& e) {
      EXPECT_TRUE(e.is_user_error()) << bad;
      EXPECT_NE(std::string(e.what()).find("is not a Slurm host list"), std::string::npos) << e.what();
    }
  }
}

// A Slurm task without MASTER_ADDR/MASTER_PORT takes the job's first node
// and a port from the job id; the variables, or the recipe's own address,
// win when given.
TEST(SlurmHostList, WorkersFindNodeZeroWithoutAHandWrittenMasterAddr) {
  for (const char* v : {"MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_NODELIST", "SLURM_JOB_ID", "SLURM_PROCID",
                        "SLURM_NTASKS"}) {
    unsetenv(v);
  }
  Env env;
  env.set("SLURM_PROCID", "5");
  env.set("SLURM_NTASKS", "8");
  env.set("SLURM_JOB_NODELIST", "gpu[07-08]");
  env.set("SLURM_JOB_ID", "4242177");
  bagua::Recipe recipe;
  bagua::adopt_slurm_environment(recipe);
  EXPECT_STREQ(std::getenv("MASTER_ADDR"), "gpu07");
  EXPECT_EQ(std::string(std::getenv("MASTER_PORT")), std::to_string(bagua::launch::slurm_default_port(4242177)));
  EXPECT_EQ(bagua::launch::slurm_default_port(4242177), 22177);
  EXPECT_STREQ(std::getenv("RANK"), "5");
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
  recipe.distributed.master_addr = "10.1.2.3";
  recipe.distributed.master_port = 29511;
  bagua::adopt_slurm_environment(recipe);
  EXPECT_STREQ(std::getenv("MASTER_ADDR"), "10.1.2.3");
  EXPECT_STREQ(std::getenv("MASTER_PORT"), "29511");
  env.set("MASTER_ADDR", "head");
  env.set("MASTER_PORT", "1234");
  bagua::adopt_slurm_environment(recipe);
  EXPECT_STREQ(std::getenv("MASTER_ADDR"), "head");
  EXPECT_STREQ(std::getenv("MASTER_PORT"), "1234");
  for (const char* v : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK"}) unsetenv(v);
}

TEST(OutputLock, ASecondRunIsToldWhoHoldsTheDirectory) {
  const auto dir = std::filesystem::temp_directory_path() / ("bagua-lock-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  {
    bagua::OutputLock first;  // held for the run, as the agent holds it
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
  // Released with the lock object: a process may run the agent again.
  bagua::OutputLock again;
  EXPECT_FALSE(again.acquire(dir, 0));
  std::filesystem::remove_all(dir);
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

namespace {

// torchrun's PET_* variables, as a map the tests fill.
std::function<const char*(const char*)> pet_env(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string pet_error(const std::map<std::string, std::string>& vars) {
  try {
    bagua::pet_defaults(pet_env(vars));
  } catch (const bagua::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

// What a Kubeflow TrainJob pod sets, and nothing else, is a whole set of
// flags; the command line's keys are not read from the environment.
TEST(PetDefaults, ATrainJobPodsVariablesBecomeTheDistributedKeys) {
  auto pet = bagua::pet_defaults(pet_env({{"PET_NNODES", "3"},
                                          {"PET_NPROC_PER_NODE", "4"},
                                          {"PET_NODE_RANK", "2"},
                                          {"PET_MASTER_ADDR", "job-node-0-0.job"},
                                          {"PET_MASTER_PORT", "29400"},
                                          {"PET_MAX_RESTARTS", "2"},
                                          {"PET_RDZV_ID", "job"}}));
  EXPECT_EQ(pet.overrides,
            (std::vector<std::string>{"distributed.nnodes=3", "distributed.nproc_per_node=4", "distributed.node_rank=2",
                                      "distributed.master_addr=\"job-node-0-0.job\"", "distributed.master_port=29400",
                                      "distributed.max_restarts=2"}));
  EXPECT_TRUE(pet.notes.empty());
  auto flags_win = bagua::pet_defaults(
      pet_env({{"PET_NNODES", "1:4"}, {"PET_NODE_RANK", "x"}, {"PET_MASTER_PORT", "29400"}}),
      {"nnodes", "node_rank"});
  EXPECT_EQ(flags_win.overrides, (std::vector<std::string>{"distributed.master_port=29400"}));
  EXPECT_TRUE(bagua::pet_defaults(pet_env({})).overrides.empty());
}

TEST(PetDefaults, TheRendezvousEndpointNamesTheMasterUnlessTheMasterIsGiven) {
  EXPECT_EQ(bagua::pet_defaults(pet_env({{"PET_RDZV_ENDPOINT", "trainer-master-0:23456"}})).overrides,
            (std::vector<std::string>{"distributed.master_addr=\"trainer-master-0\"", "distributed.master_port=23456"}));
  EXPECT_EQ(bagua::pet_defaults(pet_env({{"PET_RDZV_ENDPOINT", "[fd00::1]:29500"}})).overrides,
            (std::vector<std::string>{"distributed.master_addr=\"fd00::1\"", "distributed.master_port=29500"}));
  EXPECT_EQ(bagua::pet_defaults(pet_env({{"PET_RDZV_ENDPOINT", "head:1"}, {"PET_MASTER_ADDR", "other"}})).overrides,
            (std::vector<std::string>{"distributed.master_addr=\"other\"", "distributed.master_port=1"}));
  EXPECT_EQ(bagua::pet_defaults(pet_env({{"PET_NNODES", "2:2"}, {"PET_NODE_RANK", "1"}})).overrides,
            (std::vector<std::string>{"distributed.nnodes=2", "distributed.node_rank=1"}));
  auto gpu = bagua::pet_defaults(pet_env({{"PET_NPROC_PER_NODE", "gpu"}}));
  EXPECT_TRUE(gpu.overrides.empty());
  ASSERT_EQ(gpu.notes.size(), 1u);
  EXPECT_NE(gpu.notes[0].find("the recipe's distributed.nproc_per_node is used"), std::string::npos);
}

// PET_NNODES=MIN:MAX, or N with no node rank anywhere, is an elastic job
// (whose rendezvous assigns node ranks); N:N with a node rank is N. What
// bagua cannot read is refused, naming the variable.
TEST(PetDefaults, AnElasticRangeOrAMissingNodeRankMakesAnElasticJobAndBadValuesAreRefused) {
  EXPECT_EQ(bagua::pet_defaults(pet_env({{"PET_NNODES", "1:4"}})).overrides,
            (std::vector<std::string>{"distributed.nnodes='1:4'"}));
  EXPECT_EQ(bagua::pet_defaults(pet_env({{"PET_NNODES", "1:4"}, {"PET_NODE_RANK", "0"}})).overrides,
            (std::vector<std::string>{"distributed.nnodes='1:4'", "distributed.node_rank=0"}));
  EXPECT_EQ(bagua::pet_defaults(pet_env({{"PET_NNODES", "2"}})).overrides,
            (std::vector<std::string>{"distributed.nnodes='2:2'"}));
  EXPECT_EQ(bagua::pet_defaults(pet_env({{"PET_NNODES", "2"}}), {"node_rank"}).overrides,
            (std::vector<std::string>{"distributed.nnodes=2"}));
  EXPECT_EQ(bagua::pet_defaults(pet_env({{"PET_NNODES", "1"}})).overrides,
            (std::vector<std::string>{"distributed.nnodes=1"}));
  EXPECT_NE(pet_error({{"PET_NNODES", "3:2"}}).find("PET_NNODES=3:2: expected MIN:MAX with MIN no larger than MAX"),
            std::string::npos);
  for (const auto& [var, value] : std::map<std::string, std::string>{{"PET_NNODES", "two"},
                                                                      {"PET_NPROC_PER_NODE", "0"},
                                                                      {"PET_NODE_RANK", "-1"},
                                                                      {"PET_MASTER_PORT", "70000"},
                                                                      {"PET_MAX_RESTARTS", "many"},
                                                                      {"PET_RDZV_ENDPOINT", ":29500"}}) {
    const std::string error = pet_error({{var, value}});
    EXPECT_NE(error.find(var + "=" + value), std::string::npos) << var << ": " << error;
  }
}

}  // namespace
