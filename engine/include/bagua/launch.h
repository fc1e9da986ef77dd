// The local launcher: a torchrun-compatible supervisor for the workers of one node.
//
// LocalSupervisor starts `nproc_per_node` copies of one command, each in its
// own process group, with the environment torchrun gives its workers (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK,
// ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT,
// OMP_NUM_THREADS). Worker stdin is /dev/null.
//
// Contract of run():
//   - Output is forwarded line by line: a line of one rank is never split by
//     a line of another; a last line without a newline is flushed at exit.
//   - It returns when every worker has exited. The first worker that exits
//     with a non-zero code or on a signal is the root cause (first_failure);
//     the others still running are sent SIGTERM (to their whole process
//     group), then SIGKILL after stop_grace, and marked stopped_by_supervisor.
//     A worker that exits during that stop with one of cause_statuses,
//     when the first failure's status is not one, is the root cause
//     instead: a rank that found bad input makes its peers fail too (their
//     connection to it closes), and which of them exits first is a race.
//     Once they are all gone, each worker's process group gets a last
//     SIGKILL, so nothing a stopped worker started outlives run(); workers
//     are reaped only after it (exits are read with WNOWAIT), so no group
//     id can have passed to an unrelated process meanwhile. After a
//     successful run, children a worker left behind are left alone.
//   - While it runs, SIGINT, SIGTERM and SIGUSR1 to this process stop the
//     workers the same way and run() returns with interrupted = true. It
//     installs handlers for those and SIGCHLD for that time and restores the
//     previous ones before returning; one run() at a time per process.
//   - A command that cannot be executed is a failure of that rank: exit code
//     127 (126 when found but not executable) and a message in its output.
//   - It throws ConfigError for a log_dir it cannot create, and bagua::Error
//     when the system refuses resources (fork, pipes); it never leaves
//     workers behind when it throws.
#pragma once

#include <bagua/system.h>  // find_free_port(), signal_name()

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bagua {

struct LaunchOptions {
  // argv of every worker; command[0] is looked up in the workers' PATH
  // unless it contains a '/'. Must not be empty.
  std::vector<std::string> command;
  // Workers started on this node (>= 1).
  int nproc_per_node = 1;
  // Nodes taking part in the job (>= 1); WORLD_SIZE = nnodes * nproc_per_node.
  int nnodes = 1;
  // This node's index, 0 <= node_rank < nnodes; RANK = node_rank * nproc_per_node + local rank.
  int node_rank = 0;
  // Address of the rendezvous (TCPStore) host, passed on as MASTER_ADDR.
  std::string master_addr = "127.0.0.1";
  // Rendezvous port, passed on as MASTER_PORT (0..65535). 0: pick a free
  // port on master_addr when run() starts; only allowed when nnodes == 1,
  // since every node must agree on the port (else ConfigError).
  int master_port = 0;
  // When not empty: the rendezvous store is c10d's FileStore at this path
  // (its directory private to the run, made and removed by the caller:
  // RendezvousServer::private_file()), not a TCP server: the workers get
  // BAGUA_STORE_FILE instead of MASTER_PORT, and nothing of the store is on
  // the network. Only with nnodes == 1 (else ConfigError); master_port is
  // then unused.
  std::string store_file;
  // Added to every worker's environment; overrides everything else, the
  // torchrun variables included. Keys must be non-empty and contain no '='.
  std::map<std::string, std::string> extra_env;
  // Forward each worker's stdout/stderr lines prefixed "[rank N] " (N the
  // global rank); false forwards them unchanged (still whole lines).
  bool prefix_output = true;
  // When non-empty: every rank's stdout and stderr also go, unprefixed, to
  // LOG_DIR/rank-N.log (N the global rank). The directory is created.
  std::string log_dir;
  // -1: forward every rank's output to the terminal. N: only global rank N's;
  // the others go only to their logs. Must be -1 or a rank of the job.
  int echo_rank = -1;
  // Sets OMP_NUM_THREADS for the workers when it is not already in this
  // process's environment (nor in extra_env). 0 = max(1, cores / nproc_per_node),
  // cores being the CPUs this process may run on. Must be >= 0.
  int threads_per_worker = 0;
  // After SIGTERM to the workers, SIGKILL the ones still running after this
  // long (>= 0).
  std::chrono::milliseconds stop_grace{5000};
  // How many last output lines per rank are kept for the failure report.
  size_t tail_lines = 20;
  // Where forwarded output goes: workers' stdout lines to stdout_fd, their
  // stderr lines to stderr_fd. Defaults: this process's stdout and stderr;
  // -1 discards (log_dir and the failure tail still get the lines). The
  // supervisor does not close them.
  int stdout_fd = 1;
  int stderr_fd = 2;
  // Progress watch. bagua's workers publish their step and phase every
  // second through the rendezvous store at master_addr:master_port (under
  // the attempt's prefix, attempt-K/, K = TORCHELASTIC_RESTART_COUNT from
  // extra_env); with watch_progress the supervisor reads every rank's
  // (every node's) and sets BAGUA_PROGRESS_STORE=1 for its workers:
  //   - a rank that made no progress for stall_warning while another waits
  //     is named on stderr (repeated every stall_warning while it lasts);
  //   - a rank whose reports stopped (a stopped, frozen or hung process) for
  //     stall_timeout stops the job: LaunchResult::stall names it;
  //   - when a worker fails, a rank that had stopped reporting is named as
  //     the likely cause (its peers' timeouts follow from it);
  //   - a failure on another node (published by its supervisor through the
  //     store) stops this node's workers too: LaunchResult::remote_failure.
  // Without a store to read (not started yet, gone) the watch does nothing.
  bool watch_progress = false;
  // Exit codes that name the cause of a failure better than a peer's (see
  // the contract above); `bagua run` gives 2 (bad input) and 4 (diverged).
  std::vector<int> cause_statuses;
  std::chrono::milliseconds stall_warning{60000};
  std::chrono::milliseconds stall_timeout{0};  // 0: never stop for a stall
  // Asked about once a second while the workers run (from the thread that
  // called run()); when it returns a reason, the workers are stopped as for
  // SIGTERM (they checkpoint at the next step boundary) and
  // LaunchResult::stopped_for says why. bagua run's elastic agent stops a
  // round this way when a node waits to join. Must not throw.
  std::function<std::optional<std::string>()> stop_when;
};

// How one worker ended.
struct WorkerExit {
  int rank = -1, local_rank = -1;
  int pid = -1;            // its process id (also its process group id)
  bool signaled = false;   // died on a signal
  int status = 0;          // exit code, or signal number when signaled; -1: unknown
  bool stopped_by_supervisor = false;  // we terminated it after another failure or an interrupt
  std::string exec_error;  // set when its command could not be executed (e.g. "could not execute 'foo': No such file or directory")
  // True when it exited 0.
  bool succeeded() const { return !signaled && status == 0; }
  // "exit code 3", "signal 11 (SIGSEGV)", "exit code 127 (could not execute ...)".
  std::string describe() const;
};

struct LaunchResult {
  bool ok = false;                         // every worker exited 0 and no interrupt came
  std::optional<WorkerExit> first_failure; // the root cause: the first worker that failed on its own
  std::vector<WorkerExit> workers;         // one per local worker, by local rank
  std::vector<std::string> failure_tail;   // last output lines of the failed rank
  // The failed rank's output alone went to the terminal as it came
  // (echo_rank): summary() does not repeat its last lines.
  bool failure_echoed = false;
  bool interrupted = false;                // the supervisor got SIGINT/SIGTERM/SIGUSR1
  int interrupt_signal = 0;                // which one, when interrupted
  // With watch_progress: the rank that stopped making progress, in words
  // ("rank 1 (node 0) stopped reporting progress 15 s ago, at step 12 in
  // forward"), when that stopped the job or preceded the failure.
  std::string stall;
  // With watch_progress: another node's failure that stopped this node, or
  // that was published before this node's own first_failure (whose workers
  // then most likely failed for losing their peers there).
  std::string remote_failure;
  // Set when LaunchOptions::stop_when stopped the workers: its reason.
  std::string stopped_for;
  // This node's rank when the job has several nodes (named in summary()), else -1.
  int node_rank = -1;
  // One clear paragraph, e.g. "rank 1 (local rank 1) failed with exit code 3;
  // stopped the other 3 workers. Last lines of its output:\n  ..." (with
  // several nodes: "rank 3 (node 1, local rank 1) failed ...").
  std::string summary() const;
};

class LocalSupervisor {
 public:
  // Validates options; throws ConfigError naming the offending option.
  explicit LocalSupervisor(LaunchOptions options);

  // Starts all workers, forwards their output and waits for them; on the
  // first failure or an interrupt stops the others (see the contract above).
  // A worker failure is a result, not an exception. Workers get SIGKILL
  // when the thread that called run() ends (PR_SET_PDEATHSIG), so they never
  // outlive a supervisor killed outright: call it from a thread that lives
  // until it returns (bagua's CLI calls it from its main thread).
  LaunchResult run();

  // The port actually used: options.master_port when given, else the port
  // picked when run() started (0 before that).
  int master_port() const;

  const LaunchOptions& options() const { return options_; }

 private:
  LaunchOptions options_;
  int master_port_ = 0;
};

// The rendezvous store (c10d's TCPStore server) served by the launcher of
// node 0 for the whole run, as torchrun's agent does: it outlives workers
// and restarts, so the progress watch can read a stopped rank 0's peers,
// and a port in use fails at once. Workers learn they must not serve it
// from TORCHELASTIC_USE_AGENT_STORE=True (set in extra_env by the caller).
class RendezvousServer {
 public:
  // Listens on `port` (0: a free one) on every interface. Throws
  // ConfigError naming addr:port when it cannot (e.g. the port is in use).
  RendezvousServer(const std::string& addr, int port);
  // A one-node run's store, on nothing but the file system: a FileStore in
  // a directory of its own (mode 0700) under $TMPDIR (else /tmp), removed
  // with everything in it when this is destroyed. Throws ConfigError when
  // the directory cannot be made.
  static std::unique_ptr<RendezvousServer> private_file();
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;
  int port() const;  // 0 for a private_file() store
  // The store's file for a private_file() store, else empty.
  const std::string& file() const;

 private:
  RendezvousServer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bagua
