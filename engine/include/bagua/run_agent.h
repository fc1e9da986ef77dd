// The run agent: what `bagua run` is on one node before any worker trains,
// the part torchrun calls its agent (torch's SimpleElasticAgent is the
// model). It takes a validated recipe and
//   - holds the output directory (OutputLock: one run at a time per node);
//   - checks the recipe can run here and its data (bad data fails before
//     any worker starts; IDX images stay in memory for the workers to map);
//   - on node 0 (in an elastic job: the node at master_addr) serves the
//     rendezvous store for the whole run, and starts the dataset cache's
//     redis-server when the recipe asks for one;
//   - then runs one loop of rounds:
//
//        rendezvous: who trains in this round, and this node's rank
//          -> start the workers with LocalSupervisor (bagua/launch.h)
//          -> watch them until they end (or a node waits to join)
//          -> how the round ended (LaunchResult)
//          -> the policy (decide_after_attempt, then decide_after_round:
//             pure functions) -> finish with an exit code, or the next
//             round, resumed from the newest checkpoint, each round's logs
//             kept.
//
//     A fixed-size job is a rendezvous whose membership never changes: its
//     rounds are the restarts after failures. In an elastic job
//     (distributed.nnodes "MIN:MAX") the nodes meet on the store at
//     master_addr and take their ranks in order of arrival, and a lost,
//     leaving or joining node starts the next round at the new world size
//     (launch/elastic_rendezvous.h); failures and membership changes take
//     the same path, only failures count against distributed.max_restarts.
// Everything it holds is released when run_agent() returns, so a process
// may run it more than once. It says what happens through `say` (the CLI
// prefixes "bagua run: ") and returns the run's exit code
// (bagua/exit_codes.h).
//
// How a process was started decides whether it is the agent or a worker:
// started_as() reads torchrun's variables (RANK, WORLD_SIZE: torchrun, a
// Kubernetes PyTorchJob, the agent's own workers) and Slurm's
// (SLURM_PROCID, SLURM_NTASKS: srun starts one task per worker), and
// adopt_slurm_environment() translates Slurm's into torchrun's.
#pragma once

#include <bagua/exit_codes.h>
#include <bagua/launch.h>
#include <bagua/recipe.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace bagua {

// ---------------------------------------------------------------- how this process started

enum class StartedAs {
  kAgent,           // no worker variables: launch the workers of this node
  kTorchrunWorker,  // RANK and WORLD_SIZE are set
  kSlurmTask,       // SLURM_PROCID, SLURM_NTASKS and SLURM_STEP_ID are set (and not RANK): an srun task
  // SLURM_PROCID and SLURM_NTASKS without SLURM_STEP_ID: a Slurm job's
  // batch script or salloc shell, which srun has not made a task of (its
  // SLURM_PROCID is 0 whatever the job's tasks).
  kSlurmBatchShell,
};
StartedAs started_as();

// Tasks on this node from SLURM_TASKS_PER_NODE ("3,2" or "2(x3),1", one
// entry per node in node order) and SLURM_NODEID; else
// SLURM_NTASKS_PER_NODE; else nothing.
std::optional<int> slurm_tasks_on_this_node();

// torchrun's defaults for its flags, as a Kubeflow TrainJob pod or a
// PyTorchJob with elasticPolicy sets them (and nothing else), read as
// defaults for `bagua run`'s: PET_NNODES (N; MIN:MAX, or N with no node
// rank, make an elastic job whose rendezvous assigns node ranks),
// PET_NPROC_PER_NODE (a number; auto, cpu and gpu keep the recipe's),
// PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT, PET_RDZV_ENDPOINT
// (HOST:PORT, for the master when PET_MASTER_* are not set),
// PET_MAX_RESTARTS; PET_RDZV_ID is accepted and has no effect. Returned as
// recipe overrides ("distributed.KEY=VALUE") to go before the command
// line's own, which win, with notes to print. `env` reads a variable (null
// when unset); `given` names the distributed keys the command line sets,
// whose variables are not read. Throws InvalidArgument, naming the
// variable, for a value bagua cannot read.
struct PetDefaults {
  std::vector<std::string> overrides;
  std::vector<std::string> notes;
};
PetDefaults pet_defaults(const std::function<const char*(const char*)>& env, const std::set<std::string>& given = {});

// A number of nodes as `--nnodes` and PET_NNODES give it: N, or MIN:MAX.
// Throws InvalidArgument saying why when it is neither.
struct NodeCount {
  int min = 1, max = 1;
  bool range = false;  // written MIN:MAX (N:N included)
  // The value for distributed.nnodes: N as a number when not a range, or a
  // range N:N with the node rank given; else the string "MIN:MAX" (an
  // elastic job).
  std::string recipe_value(bool node_rank_given) const;
};
NodeCount parse_nnodes(const std::string& text);

// A rendezvous endpoint as `--rdzv-endpoint` and PET_RDZV_ENDPOINT give
// it: HOST:PORT or [IPv6]:PORT, or HOST alone unless `port_required`.
// Throws InvalidArgument ("expected HOST:PORT ...") otherwise.
struct Endpoint {
  std::string host;
  std::optional<int> port;
};
Endpoint parse_endpoint(const std::string& text, bool port_required);

// Sets torchrun's variables from Slurm's (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK), and MASTER_ADDR/MASTER_PORT from the
// recipe when they are not set.
void adopt_slurm_environment(const Recipe& recipe);

// A Slurm task: records in the resolved recipe (recipe.resolved.yaml,
// provenance.json) the world it runs in, from torchrun's variables (after
// adopt_slurm_environment()): nnodes, nproc_per_node and master_addr, where
// the recipe's own said one node on 127.0.0.1 (the port, derived from the
// job id, is left out: it would make every two jobs' records differ). An
// elastic recipe's range is left as it is.
void record_worker_world(Recipe& recipe);

// ---------------------------------------------------------------- the restart policy

// What to do after a round (one LocalSupervisor::run()) ended.
struct AttemptDecision {
  enum class Action { kFinish, kRestart };  // kRestart: the next round
  enum class Reason {
    kSucceeded,           // every worker exited 0
    kInterrupted,         // a signal reached this agent: SIGINT exits 130, SIGTERM/SIGUSR1 75
    kStoppedByAgreement,  // the workers stopped together after a checkpoint (they exit 130 or 75; so does the run)
    kWouldFailAgain,      // a worker found bad input (2) or diverged (4)
    kRestartsExhausted,   // attempt == max_restarts
    kRestartable,         // anything else, with restarts left
    // Membership changes (decide_after_round, elastic jobs only): the next
    // round, not counted against max_restarts.
    kNodeWaiting,       // a node waits to join: the workers stopped at a step with a checkpoint
    kNodeJoined,        // the round failed as a node joined (its workers stopped before a step)
    kOtherNodeStopped,  // stopped by agreement at another node's request: it leaves, or one joins
    kNodeLost,          // the round failed as a node of it left or stopped answering (its keep-alive lapsed)
  };
  Action action = Action::kFinish;
  Reason reason = Reason::kSucceeded;
  int exit_code = kExitOk;  // when finishing
  // A failure of the workers (counted against max_restarts when restarted).
  bool failed() const { return reason == Reason::kRestartable || reason == Reason::kRestartsExhausted; }
};

// The failure policy. `attempt`: the failed rounds before this one,
// counting from 0; `max_restarts` is distributed.max_restarts.
AttemptDecision decide_after_attempt(const LaunchResult& result, int attempt, int max_restarts);

// What the rendezvous knows of the membership when a round ended.
struct MembershipNews {
  bool can_change = false;  // an elastic job; a fixed-size job's membership never changes
  // Nodes waiting for the next round that were not in this one (asked of
  // the rendezvous when the round failed).
  std::vector<std::string> newcomers;
  // Nodes of this round that left or stopped answering (their keep-alive
  // lapsed; asked of the rendezvous when the round failed).
  std::vector<std::string> lost;
};

// The membership policy over the failure policy's `attempt`: in an elastic
// job a node waiting to join (LaunchResult::stopped_for), a failure as a
// node joined or as one was lost, or a stop another node asked for start
// the next round; a fixed-size job's decision is `attempt` unchanged.
AttemptDecision decide_after_round(const LaunchResult& result, const AttemptDecision& attempt,
                                   const MembershipNews& news);

// ---------------------------------------------------------------- the agent

// One run at a time in an output directory (per node: the nodes of one job
// may share it): an flock on OUTPUT/.bagua-run-node-R.lock, held by this
// process and inherited by its workers, so it is released only when the
// last of them is gone; the file names the holder for whoever finds it held.
class OutputLock {
 public:
  OutputLock() = default;
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;
  // Returns an error message when another run holds the directory (or it
  // cannot be created or opened). Holds the lock until destroyed, and the
  // workers started meanwhile (who inherit it) until the last has exited.
  std::optional<std::string> acquire(const std::filesystem::path& dir, int node_rank);
  // The lock of node NODE (OUTPUT/.bagua-run-NODE.lock): "node-R", or an
  // elastic job's "host-NAME" (its node ranks change between rounds).
  std::optional<std::string> acquire(const std::filesystem::path& dir, const std::string& node);

 private:
  std::filesystem::path path_;
  int fd_ = -1;  // kept open for the life of the process
};

// Before a restart: this attempt's logs move to LOG_DIR/attempt-K/, so
// every attempt's are kept and LOG_DIR/rank-N.log is always the newest's.
// Returns an error message when some could not be moved.
// `ranks`: only those ranks' logs (an elastic job's nodes move their own
// after a round); empty: every rank's.
std::optional<std::string> keep_attempt_logs(const std::filesystem::path& log_dir, int attempt,
                                             const std::vector<int>& ranks = {});

struct RunAgentOptions {
  // argv of each worker: this program as `bagua run RECIPE` with the
  // overrides the agent was given (the workers re-read the recipe).
  std::vector<std::string> worker_command;
  // The agent's stderr is a terminal: rank 0 draws a progress bar on it.
  bool progress_tty = false;
  // Where the agent's own lines go (default: stderr, "bagua run: " first).
  std::function<void(const std::string&)> say;
};

// `bagua store`: serves an elastic job's rendezvous store (c10d's TCPStore)
// on `port` of every interface, from a machine that need not run workers,
// so that the job survives the loss of any of its nodes. Returns 0 a few
// seconds after the job using it has ended (its agents said so in the
// store), once every node that registered has left or stopped answering
// for `idle` (and then marks the job ended), or on SIGINT or SIGTERM;
// kExitInvalidInput when the port cannot be served.
int serve_elastic_store(int port, const std::function<void(const std::string&)>& say,
                        std::chrono::seconds idle = std::chrono::seconds(60));

// Runs the recipe's workers of this node to the end; returns the exit code.
// Throws bagua::Error for what stops it before any worker starts (a recipe
// this build cannot run, bad data: user errors). Holds no state once it
// has returned.
int run_agent(const Recipe& recipe, RunAgentOptions options);

}  // namespace bagua
