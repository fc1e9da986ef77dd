#include <bagua/errors.h>
#include <bagua/launch.h>

#include "comm/network_route.h"
#include "launch/progress_monitor.h"
#include "launch/rank_output.h"
#include "launch/signal_relay.h"
#include "common/unique_fd.h"
#include "launch/worker_process.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <memory>
#include <poll.h>
#include <set>
#include <sched.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace bagua {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// After the last worker exited, how long its pipes may stay open (held by a
// child it left behind) before we stop reading them.
constexpr milliseconds kDrainLinger{500};
// poll() wakes up at least this often, even with no signal or output.
constexpr milliseconds kPollPeriod{1000};
constexpr milliseconds kStartUpGrace{2000};  // begin_stop(), for workers still starting

void require(bool condition, const std::string& option, const std::string& message) {
  if (!condition) throw ConfigError("launch option " + option + " " + message);
}

std::map<std::string, std::string> current_environment() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const char* equals = std::strchr(*entry, '=');
    if (equals == nullptr) continue;
    env.emplace(std::string(*entry, static_cast<size_t>(equals - *entry)), std::string(equals + 1));
  }
  return env;
}

// CPUs this process may run on (its affinity mask), at least 1.
int usable_cores() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

std::string default_path() {
  size_t size = ::confstr(_CS_PATH, nullptr, 0);
  if (size == 0) return "/bin:/usr/bin";
  std::string path(size, '\0');
  ::confstr(_CS_PATH, path.data(), size);
  path.resize(size - 1);
  return path;
}

void signal_group(pid_t pgid, int signal_number) {
  if (pgid > 0) ::kill(-pgid, signal_number);  // ESRCH: the group is already gone
}

struct Worker {
  WorkerExit exit;
  bool running = false;
  // Exited and seen (waitid with WNOWAIT), not yet reaped: while it is a
  // zombie its pid, and so its process group's id, cannot be reused, so
  // the final sweep's SIGKILL to the group cannot reach another's.
  bool zombie = false;
  UniqueFd pipes[2];  // indexed by launch::Stream
  std::unique_ptr<launch::RankOutput> output;
};

// The state of one LocalSupervisor::run(). Its destructor makes sure no worker
// outlives it, even when run() throws.
class SupervisedRun {
 public:
  SupervisedRun(const LaunchOptions& options, int master_port)
      : options_(options), master_port_(master_port) {}

  ~SupervisedRun() {
    for (auto& w : workers_) {
      if (!w.running) continue;
      signal_group(w.exit.pid, SIGKILL);
      int status;
      while (::waitpid(w.exit.pid, &status, 0) < 0 && errno == EINTR) {
      }
      w.running = false;
    }
    reap_zombies();
  }

  // Reaps the workers that exited (after the final sweep, if any).
  void reap_zombies() {
    for (auto& w : workers_) {
      if (!w.zombie) continue;
      int status;
      while (::waitpid(w.exit.pid, &status, 0) < 0 && errno == EINTR) {
      }
      w.zombie = false;
    }
  }

  LaunchResult execute() {
    // Outside the run agent, before the signal relay: a Ctrl-C while the
    // master's name does not resolve yet simply ends us (no worker exists).
    choose_gloo_interface();
    // In force before the first fork: a Ctrl-C while starting must not kill
    // us and orphan the workers already running. The run agent's own, when
    // there is one: a signal that came since its rendezvous is still there,
    // and stops these workers as soon as they are started.
    launch::RelayInScope relay;
    UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!dev_null.valid()) throw Error(std::string("launch: cannot open /dev/null: ") + std::strerror(errno));
    std::map<std::string, std::string> env = base_environment();
    if (options_.watch_progress) {
      auto attempt = options_.extra_env.find("TORCHELASTIC_RESTART_COUNT");
      monitor_ = std::make_unique<launch::ProgressMonitor>(
          options_, master_port_, options_.nnodes * options_.nproc_per_node,
          attempt == options_.extra_env.end() ? std::string("0") : attempt->second);
    }
    workers_.reserve(options_.nproc_per_node);
    for (int local_rank = 0; local_rank < options_.nproc_per_node; ++local_rank) {
      start(local_rank, env, dev_null.get());
    }
    supervise(*relay);
    name_first_divergence();
    return result();
  }

 private:
  int global_rank(int local_rank) const { return options_.node_rank * options_.nproc_per_node + local_rank; }

  // What every worker shares: this process's environment plus the job-wide variables.
  std::map<std::string, std::string> base_environment() const {
    std::map<std::string, std::string> env = current_environment();
    int world_size = options_.nnodes * options_.nproc_per_node;
    env["WORLD_SIZE"] = std::to_string(world_size);
    env["LOCAL_WORLD_SIZE"] = std::to_string(options_.nproc_per_node);
    env["GROUP_RANK"] = std::to_string(options_.node_rank);
    env["ROLE_WORLD_SIZE"] = std::to_string(world_size);
    env["MASTER_ADDR"] = options_.master_addr;
    if (options_.store_file.empty()) {
      env["MASTER_PORT"] = std::to_string(master_port_);
      env.erase("BAGUA_STORE_FILE");
    } else {
      env["BAGUA_STORE_FILE"] = options_.store_file;  // the workers' store: no port
      env.erase("MASTER_PORT");
    }
    env["TORCHELASTIC_RESTART_COUNT"] = "0";
    if (options_.watch_progress) env["BAGUA_PROGRESS_STORE"] = "1";
    if (!gloo_interface_.empty()) env["GLOO_SOCKET_IFNAME"] = gloo_interface_;
    if (env.count("OMP_NUM_THREADS") == 0) {
      int threads = options_.threads_per_worker > 0
                        ? options_.threads_per_worker
                        : std::max(1, usable_cores() / options_.nproc_per_node);
      env["OMP_NUM_THREADS"] = std::to_string(threads);
    }
    return env;
  }

  // Several nodes: Gloo would bind to the address the host name resolves
  // to (loopback on a stock Debian host), where no other node can reach it.
  // The workers get GLOO_SOCKET_IFNAME = the interface that routes to the
  // master (gloo_interface_), unless the user (or extra_env) set one; either
  // way it is said.
  void choose_gloo_interface() {
    if (options_.nnodes == 1 || options_.extra_env.count("GLOO_SOCKET_IFNAME")) return;
    const std::string intro = "node " + std::to_string(options_.node_rank) + ": the workers' Gloo uses ";
    if (const char* given = std::getenv("GLOO_SOCKET_IFNAME"); given && *given) {
      say(intro + given + " (from GLOO_SOCKET_IFNAME)");
      return;
    }
    // The master's name may not resolve yet (a Kubernetes headless service
    // publishes a pod's name once it runs): retried for as long as the
    // workers would wait for the rendezvous.
    const auto patience = options_.stall_timeout.count() > 0 ? options_.stall_timeout : std::chrono::seconds(300);
    const auto give_up = Clock::now() + patience;
    comm::NetworkRoute route;
    for (bool said = false;; said = true) {
      try {
        route = comm::route_to(options_.master_addr, master_port_);
        break;
      } catch (const Error& e) {
        if (Clock::now() >= give_up) throw ConfigError(std::string("launch option master_addr: ") + e.what());
        if (!said) say(std::string(e.what()) + "; retrying");
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    gloo_interface_ = route.interface;
    say(intro + comm::describe_route(route, options_.master_addr));
  }

  void say(const std::string& line) const {
    if (options_.stderr_fd < 0) return;
    const std::string text = "bagua: " + line + "\n";
    ssize_t ignored = ::write(options_.stderr_fd, text.data(), text.size());  // one write: a whole line
    (void)ignored;
  }

  void start(int local_rank, std::map<std::string, std::string> env, int stdin_fd) {
    int rank = global_rank(local_rank);
    env["RANK"] = std::to_string(rank);
    env["ROLE_RANK"] = std::to_string(rank);
    env["LOCAL_RANK"] = std::to_string(local_rank);
    for (const auto& [key, value] : options_.extra_env) env[key] = value;

    launch::WorkerPlan plan;
    plan.argv = options_.command;
    // Like execvp, an unset PATH means the system's default search path.
    plan.exec_paths = launch::exec_candidates(options_.command[0], env.count("PATH") ? env["PATH"] : default_path());
    for (const auto& [key, value] : env) plan.env.push_back(key + "=" + value);

    launch::OutputSinks sinks;
    bool echo = options_.echo_rank < 0 || options_.echo_rank == rank;
    sinks.stdout_fd = echo ? options_.stdout_fd : -1;
    sinks.stderr_fd = echo ? options_.stderr_fd : -1;
    if (options_.prefix_output) sinks.prefix = "[rank " + std::to_string(rank) + "] ";
    if (!options_.log_dir.empty()) sinks.log = open_log(rank);
    sinks.tail_lines = options_.tail_lines;

    Worker& w = workers_.emplace_back();
    w.exit.rank = rank;
    w.exit.local_rank = local_rank;
    w.output = std::make_unique<launch::RankOutput>(std::move(sinks));
    launch::StartedWorker started = launch::start_worker(plan, stdin_fd);
    w.exit.pid = started.pid;
    w.running = true;
    w.pipes[0] = std::move(started.stdout_fd);
    w.pipes[1] = std::move(started.stderr_fd);
    if (started.exec_errno != 0) {
      w.exit.exec_error =
          "could not execute '" + options_.command[0] + "': " + std::strerror(started.exec_errno);
      w.output->add_line(launch::Stream::kStderr, w.exit.exec_error);
    }
  }

  UniqueFd open_log(int rank) const {
    std::filesystem::path path =
        std::filesystem::path(options_.log_dir) / ("rank-" + std::to_string(rank) + ".log");
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid()) {
      throw ConfigError("launch option log_dir: cannot write '" + path.string() + "': " + std::strerror(errno));
    }
    return fd;
  }

  // Stops every worker still running: SIGTERM to its process group now,
  // SIGKILL once stop_grace has passed (see supervise()).
  void begin_stop() {
    if (stopping_) return;
    stopping_ = true;
    // Workers that have not left start-up (in the rendezvous, waiting for a
    // peer that may never come) have nothing to save: a short grace, not
    // distributed.stop_grace_s, before they are killed.
    auto grace = std::chrono::duration_cast<milliseconds>(options_.stop_grace);
    if (monitor_ && monitor_->still_starting()) grace = std::min(grace, kStartUpGrace);
    kill_deadline_ = Clock::now() + grace;
    for (auto& w : workers_) {
      if (!w.running) continue;
      w.exit.stopped_by_supervisor = true;
      signal_group(w.exit.pid, SIGTERM);
      // A stopped process (SIGSTOP, Ctrl-Z) acts on SIGTERM only once it runs.
      signal_group(w.exit.pid, SIGCONT);
    }
  }

  void kill_rank(int rank) {
    for (auto& w : workers_) {
      if (w.running && w.exit.rank == rank) {
        killed_ranks_.insert(rank);
        signal_group(w.exit.pid, SIGKILL);
      }
    }
  }

  // The caller's reason to stop (LaunchOptions::stop_when), asked about
  // once a second while no stop is under way.
  void ask_caller() {
    if (!options_.stop_when || stopping_ || !any_running()) return;
    const auto now = Clock::now();
    if (now < next_ask_) return;
    next_ask_ = now + kPollPeriod;
    if (auto reason = options_.stop_when()) {
      stopped_for_ = *reason;
      begin_stop();
    }
  }

  // The progress watch: a stalled rank or another node's failure stops us.
  void watch() {
    if (!monitor_ || stopping_) return;
    if (auto stop = monitor_->take_stop()) {
      stall_ = stop->stall;
      remote_failure_ = stop->remote_failure;
      for (int rank : stop->kill) kill_rank(rank);
      if (!stall_.empty()) monitor_->publish_failure(stall_);
      begin_stop();
    }
  }

  void kill_all_groups() {
    killed_ = true;
    for (auto& w : workers_) signal_group(w.exit.pid, SIGKILL);
  }

  // Whether `w` has exited; if so, records how (left a zombie: WNOWAIT,
  // reaped after the final sweep).
  bool seen_exit(Worker& w) {
    siginfo_t info{};
    int r = ::waitid(P_PID, static_cast<id_t>(w.exit.pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if (r < 0 && errno == EINTR) return false;
    if (r == 0 && info.si_pid == 0) return false;  // still running
    w.running = false;
    if (r < 0) {  // ECHILD: someone else reaped it; we cannot know how it ended
      w.exit.status = -1;
    } else {
      w.zombie = true;
      w.exit.signaled = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
      w.exit.status = info.si_status;
    }
    return true;
  }

  // How likely an exit is to be a failure's cause rather than its echo
  // (lower: likelier): a rank whose exit status names the cause (bad input,
  // a diverged training); one killed by a signal we did not send (kill -9,
  // the OOM killer, a crash); then the rest, which include the peers that
  // lost their connection to it (an error exit, or SIGPIPE).
  int cause_rank(const WorkerExit& e) const {
    if (is_cause(e)) return 0;
    if (e.signaled && e.status != SIGPIPE && e.status != SIGTERM && e.status != SIGINT && !killed_ &&
        !killed_ranks_.count(e.rank)) {
      return 1;
    }
    return 2;
  }

  // Collects the workers that exited; the first one that failed while we
  // were not stopping anyone is the root cause. Workers that die together
  // (one killed, its peers failing on the broken connection a moment
  // later) are often all seen in one pass: they are taken cause first.
  void reap() {
    std::vector<Worker*> exited;
    for (auto& w : workers_) {
      if (w.running && seen_exit(w)) exited.push_back(&w);
    }
    // One that exited before a failure seen in this pass, but after the
    // loop had passed it, belongs to the same moment: one more look.
    if (!exited.empty()) {
      for (auto& w : workers_) {
        if (w.running && seen_exit(w)) exited.push_back(&w);
      }
    }
    std::stable_sort(exited.begin(), exited.end(), [this](const Worker* a, const Worker* b) {
      return cause_rank(a->exit) < cause_rank(b->exit);
    });
    for (Worker* worker : exited) {
      Worker& w = *worker;
      if (first_failure_ && is_cause(w.exit) && !first_failure_->signaled && !is_cause(*first_failure_)) {
        // The rank that found the problem, not the peer that lost it first:
        // it was leaving on its own, whatever our SIGTERM.
        w.exit.stopped_by_supervisor = false;
        first_failure_ = w.exit;
      }
      if (!w.exit.succeeded() && !stopping_ && !first_failure_) {
        first_failure_ = w.exit;
        if (monitor_) {
          // A rank that went silent first is the likely cause (its peers
          // timed out waiting); the other nodes stop too.
          std::set<int> gone;
          for (const auto& other : workers_) {
            if (!other.running) gone.insert(other.exit.rank);
          }
          if (auto silent = monitor_->silent_rank(gone)) {
            stall_ = silent->second;
            kill_rank(silent->first);
          }
          monitor_->publish_failure("rank " + std::to_string(w.exit.rank) + " failed with " + w.exit.describe());
          // A worker here that lost a peer on another node fails too (an
          // error exit; a signal is never such an echo): the other node's
          // failure, published before ours, is the cause.
          if (options_.nnodes > 1 && !w.exit.signaled) {
            remote_failure_ = monitor_->earlier_remote_failure(std::chrono::seconds(2));
          }
        }
      }
    }
    if (first_failure_) begin_stop();
  }

  // Once every worker has exited: of several ranks whose training diverged
  // (an asynchronous algorithm carries one rank's NaN to its peers, and a
  // peer may find its own first and leave sooner), the cause is the one
  // whose first non-finite step ran earliest, as each reported it.
  void name_first_divergence() {
    if (!monitor_ || !first_failure_ || !is_cause(*first_failure_)) return;
    int causes = 0;
    for (const auto& w : workers_) causes += is_cause(w.exit) ? 1 : 0;
    if (causes < 2) return;
    const std::map<int, int64_t> diverged = monitor_->diverged_ranks(std::chrono::seconds(2));
    Worker* first = nullptr;
    for (auto& w : workers_) {
      auto it = diverged.find(w.exit.rank);
      if (!is_cause(w.exit) || it == diverged.end()) continue;
      if (!first || it->second < diverged.at(first->exit.rank)) first = &w;
    }
    if (!first || first->exit.rank == first_failure_->rank) return;
    auto previous = diverged.find(first_failure_->rank);
    if (previous != diverged.end() && previous->second <= diverged.at(first->exit.rank)) return;
    first->exit.stopped_by_supervisor = false;  // it was leaving on its own, whatever our SIGTERM
    first_failure_ = first->exit;
  }

  bool is_cause(const WorkerExit& e) const {
    const auto& c = options_.cause_statuses;
    return !e.signaled && std::find(c.begin(), c.end(), e.status) != c.end();
  }

  bool any_running() const {
    return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running; });
  }

  void handle_signals(launch::SignalRelay& relay) {
    for (int sig : relay.drain()) {
      if (sig != SIGINT && sig != SIGTERM && sig != SIGUSR1) continue;  // SIGCHLD only wakes us up
      if (!interrupted_) {
        interrupted_ = true;
        interrupt_signal_ = sig;
      }
      begin_stop();
    }
  }

  // Reads what is available on one pipe; closes it at end of file.
  void read_pipe(Worker& w, int stream) {
    char buffer[65536];
    for (;;) {
      ssize_t n = ::read(w.pipes[stream].get(), buffer, sizeof(buffer));
      if (n > 0) {
        w.output->feed(static_cast<launch::Stream>(stream), buffer, static_cast<size_t>(n));
        if (static_cast<size_t>(n) < sizeof(buffer)) return;  // let the other ranks have a turn
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      close_pipe(w, stream);  // end of file, or an error we cannot do anything about
      return;
    }
  }

  void close_pipe(Worker& w, int stream) {
    w.output->finish(static_cast<launch::Stream>(stream));
    w.pipes[stream].reset();
  }

  void supervise(launch::SignalRelay& relay) {
    std::optional<Clock::time_point> drain_deadline;
    for (;;) {
      handle_signals(relay);
      reap();
      watch();
      ask_caller();
      Clock::time_point now = Clock::now();
      if (stopping_ && !killed_ && now >= kill_deadline_) kill_all_groups();

      bool pipes_open = false;
      for (auto& w : workers_) pipes_open = pipes_open || w.pipes[0].valid() || w.pipes[1].valid();
      if (!any_running()) {
        if (!pipes_open) break;
        if (!drain_deadline) {
          // Leftover children of a worker may hold its pipes: when stopping, they
          // get until the SIGKILL; otherwise a short linger.
          drain_deadline = (stopping_ && !killed_ ? kill_deadline_ : now) + kDrainLinger;
        }
        if (now >= *drain_deadline) break;
      }

      Clock::time_point wake = now + kPollPeriod;
      if (stopping_ && !killed_) wake = std::min(wake, kill_deadline_);
      if (drain_deadline) wake = std::min(wake, *drain_deadline);
      int timeout_ms = static_cast<int>(
          std::chrono::ceil<milliseconds>(std::max(wake - now, Clock::duration::zero())).count());

      std::vector<pollfd> fds;
      std::vector<std::pair<Worker*, int>> owners;
      fds.push_back({relay.fd(), POLLIN, 0});
      owners.emplace_back(nullptr, -1);
      for (auto& w : workers_) {
        for (int stream = 0; stream < 2; ++stream) {
          if (!w.pipes[stream].valid()) continue;
          fds.push_back({w.pipes[stream].get(), POLLIN, 0});
          owners.emplace_back(&w, stream);
        }
      }
      int ready = ::poll(fds.data(), fds.size(), timeout_ms);
      if (ready < 0) {
        if (errno == EINTR) continue;
        throw Error(std::string("launch: poll failed: ") + std::strerror(errno));
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        auto [w, stream] = owners[i];
        if (fds[i].revents & (POLLIN | POLLHUP)) {
          read_pipe(*w, stream);
        } else {
          close_pipe(*w, stream);  // POLLERR/POLLNVAL
        }
      }
    }
    // Nothing of a stopped job may outlive run(): sweep the groups once more
    // (every leader is still a zombie, so no group id has been reused).
    if (stopping_ && !killed_) kill_all_groups();
    reap_zombies();
    for (auto& w : workers_) {
      for (int stream = 0; stream < 2; ++stream) {
        if (w.pipes[stream].valid()) close_pipe(w, stream);
      }
    }
    handle_signals(relay);  // one that came in at the very end still counts
  }

  LaunchResult result() const {
    LaunchResult r;
    r.interrupted = interrupted_;
    r.interrupt_signal = interrupt_signal_;
    r.first_failure = first_failure_;
    r.stall = stall_;
    r.remote_failure = remote_failure_;
    r.stopped_for = stopped_for_;
    if (options_.nnodes > 1) r.node_rank = options_.node_rank;
    bool all_succeeded = true;
    for (const auto& w : workers_) {
      r.workers.push_back(w.exit);
      all_succeeded = all_succeeded && w.exit.succeeded();
    }
    r.ok = all_succeeded && !interrupted_ && stall_.empty() && remote_failure_.empty();
    if (first_failure_) {
      r.failure_tail = workers_[first_failure_->local_rank].output->tail();
      r.failure_echoed = options_.echo_rank == first_failure_->rank;
    }
    return r;
  }

  const LaunchOptions& options_;
  int master_port_;
  std::vector<Worker> workers_;
  bool stopping_ = false;
  bool killed_ = false;
  std::set<int> killed_ranks_;  // ranks we killed on purpose (a stalled one)
  Clock::time_point kill_deadline_;
  std::optional<WorkerExit> first_failure_;
  std::unique_ptr<launch::ProgressMonitor> monitor_;
  std::string stall_, remote_failure_;
  std::string gloo_interface_;  // GLOO_SOCKET_IFNAME for the workers, when chosen here
  bool interrupted_ = false;
  int interrupt_signal_ = 0;
  std::string stopped_for_;        // LaunchOptions::stop_when's reason, once it gave one
  Clock::time_point next_ask_{};   // when to ask stop_when again
};

}  // namespace

LocalSupervisor::LocalSupervisor(LaunchOptions options) : options_(std::move(options)) {
  const LaunchOptions& o = options_;
  require(!o.command.empty() && !o.command[0].empty(), "command", "must name a program to run");
  require(o.nproc_per_node >= 1, "nproc_per_node", "must be >= 1, got " + std::to_string(o.nproc_per_node));
  require(o.nnodes >= 1, "nnodes", "must be >= 1, got " + std::to_string(o.nnodes));
  require(o.node_rank >= 0 && o.node_rank < o.nnodes, "node_rank",
          "must be in [0, nnodes) = [0, " + std::to_string(o.nnodes) + "), got " + std::to_string(o.node_rank));
  require(!o.master_addr.empty(), "master_addr", "must not be empty");
  require(o.master_port >= 0 && o.master_port <= 65535, "master_port",
          "must be in [0, 65535], got " + std::to_string(o.master_port));
  require(o.master_port != 0 || o.nnodes == 1, "master_port",
          "must be given when nnodes > 1 (every node must use the same port)");
  require(o.store_file.empty() || o.nnodes == 1, "store_file",
          "is for a one-node run only (the other nodes cannot read this node's files)");
  int world_size = o.nnodes * o.nproc_per_node;
  require(o.echo_rank >= -1 && o.echo_rank < world_size, "echo_rank",
          "must be -1 or a rank in [0, " + std::to_string(world_size) + "), got " + std::to_string(o.echo_rank));
  require(o.threads_per_worker >= 0, "threads_per_worker",
          "must be >= 0, got " + std::to_string(o.threads_per_worker));
  require(o.stop_grace.count() >= 0, "stop_grace", "must not be negative");
  for (const auto& [key, value] : o.extra_env) {
    require(!key.empty() && key.find('=') == std::string::npos, "extra_env",
            "has an invalid variable name '" + key + "'");
  }
  master_port_ = o.master_port;
}

int LocalSupervisor::master_port() const { return master_port_; }

LaunchResult LocalSupervisor::run() {
  if (master_port_ == 0 && options_.store_file.empty()) master_port_ = find_free_port(options_.master_addr);
  if (!options_.log_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(options_.log_dir, error);
    if (error) {
      throw ConfigError("launch option log_dir: cannot create '" + options_.log_dir + "': " + error.message());
    }
  }
  SupervisedRun run(options_, master_port_);
  return run.execute();
}

}  // namespace bagua
