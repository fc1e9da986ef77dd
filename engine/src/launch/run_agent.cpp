// The run agent of one node and its restart policy (bagua/run_agent.h).
#include <bagua/provenance.h>
#include <bagua/run_agent.h>

#include <bagua/data.h>
#include <bagua/errors.h>
#include <bagua/redis_server.h>
#include <bagua/system.h>
#include <bagua/preflight.h>

#include "comm/c10d_compat.h"
#include "launch/elastic_rendezvous.h"
#include "launch/signal_relay.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

namespace bagua {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- policy

AttemptDecision decide_after_attempt(const LaunchResult& result, int attempt, int max_restarts) {
  using Action = AttemptDecision::Action;
  using Reason = AttemptDecision::Reason;
  if (result.ok) return {Action::kFinish, Reason::kSucceeded, kExitOk};
  // A signal to this agent: Ctrl-C is an interruption, a scheduler's notice
  // (SIGTERM, SIGUSR1) a preemption, whatever the workers (which the agent
  // stops with SIGTERM) exit with.
  if (result.interrupted) {
    return {Action::kFinish, Reason::kInterrupted,
            result.interrupt_signal == SIGTERM || result.interrupt_signal == SIGUSR1 ? kExitPreempted
                                                                                     : kExitInterrupted};
  }
  // Workers exit 130 or 75 after stopping at an agreed step with a
  // checkpoint: a signal reached them directly or, in a multi-node run,
  // another node.
  const bool stopped_by_agreement =
      result.first_failure && !result.first_failure->signaled &&
      (result.first_failure->status == kExitInterrupted || result.first_failure->status == kExitPreempted);
  if (stopped_by_agreement) {
    // A preemption if any worker here got the scheduler's notice itself.
    const bool preempted = std::any_of(result.workers.begin(), result.workers.end(), [](const WorkerExit& w) {
      return !w.signaled && w.status == kExitPreempted;
    });
    return {Action::kFinish, Reason::kStoppedByAgreement, preempted ? kExitPreempted : kExitInterrupted};
  }
  // A worker that found bad input (2) or a diverged training (4) would
  // find it again: no restart, and its exit code is the run's.
  const int cause = result.first_failure && !result.first_failure->signaled ? result.first_failure->status : -1;
  if (cause == kExitInvalidInput || cause == kExitDiverged) return {Action::kFinish, Reason::kWouldFailAgain, cause};
  if (attempt >= max_restarts) return {Action::kFinish, Reason::kRestartsExhausted, kExitWorkerFailed};
  return {Action::kRestart, Reason::kRestartable, kExitWorkerFailed};
}

// ---------------------------------------------------------------- output directory

std::optional<std::string> OutputLock::acquire(const fs::path& dir, int node_rank) {
  return acquire(dir, "node-" + std::to_string(node_rank));
}

std::optional<std::string> OutputLock::acquire(const fs::path& dir, const std::string& node) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return "cannot create the output directory " + dir.string() + ": " + ec.message();
  path_ = dir / (".bagua-run-" + node + ".lock");
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT, 0644);  // no O_CLOEXEC: the workers hold it too
  if (fd_ < 0) return "cannot open " + path_.string() + ": " + std::strerror(errno);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    std::ifstream in(path_);
    std::string holder((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    while (!holder.empty() && holder.back() == '\n') holder.pop_back();
    return "the output directory " + dir.string() + " is in use by another run (" +
           (holder.empty() ? std::string("holder unknown") : holder) +
           "); wait for it to end, stop it, or set output.dir to another directory";
  }
  const std::string host = host_name();
  std::time_t now = std::time(nullptr);
  char when[64];
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::ostringstream text;
  text << "bagua run, pid " << ::getpid() << " on " << host << ", since " << when << "\n";
  const std::string t = text.str();
  if (::ftruncate(fd_, 0) == 0) {
    ssize_t ignored = ::pwrite(fd_, t.data(), t.size(), 0);
    (void)ignored;
  }
  return std::nullopt;
}

std::optional<std::string> keep_attempt_logs(const fs::path& log_dir, int attempt, const std::vector<int>& ranks) {
  std::error_code ec;
  const fs::path kept = log_dir / ("attempt-" + std::to_string(attempt));
  fs::create_directories(kept, ec);
  auto mine = [&](const std::string& name) {
    if (ranks.empty()) return true;
    return std::any_of(ranks.begin(), ranks.end(),
                       [&](int r) { return name == "rank-" + std::to_string(r) + ".log"; });
  };
  for (const auto& entry : fs::directory_iterator(log_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.rfind("rank-", 0) == 0 && entry.path().extension() == ".log" &&
        mine(name)) {
      fs::rename(entry.path(), kept / name, ec);
    }
  }
  if (ec) return "could not keep the logs of attempt " + std::to_string(attempt) + ": " + ec.message();
  return std::nullopt;
}

// ---------------------------------------------------------------- the agent

namespace {

// data.cache, before any worker starts. hosts null: this node's own
// redis-server, bound to 127.0.0.1 (only this node's workers use it), with a
// fresh password; the returned owner stops it when the run ends, and the
// workers learn where it is and its password from `env`. Listed hosts: each
// must answer AUTH and PING now (else a user Error naming host:port).
std::unique_ptr<RedisServer> prepare_cache(const Recipe& recipe, const std::string& node,
                                           std::map<std::string, std::string>& env,
                                           const std::function<void(const std::string&)>& say) {
  if (!recipe.data.cache) return nullptr;
  const CacheSpec& cache = *recipe.data.cache;
  if (!cache.hosts.empty()) {
    const char* password = std::getenv(kRedisPasswordEnv);
    check_redis_hosts(cache.hosts, password ? password : "");
    return nullptr;
  }
  RedisServerOptions options;
  options.password = random_secret();
  options.maxmemory = cache.capacity_per_node;
  const auto log_dir = fs::path(recipe.output.dir) / "logs";
  fs::create_directories(log_dir);
  options.log_path = (log_dir / ("redis-" + node + ".log")).string();
  auto server = std::make_unique<RedisServer>(options);
  const CacheHost host = server->host();
  env[kRedisHostsEnv] = host.host + ":" + std::to_string(host.port);
  env[kRedisPasswordEnv] = options.password;
  say("data.cache: started redis-server (pid " + std::to_string(server->pid()) + ") on " + host.host + ":" +
      std::to_string(host.port) + ", maxmemory " + std::to_string(cache.capacity_per_node) + " bytes; its log: " +
      options.log_path);
  return server;
}

}  // namespace

namespace {

using Say = std::function<void(const std::string&)>;

// What the agent says when its workers stopped at a step together (a
// signal here, or a stop that reached them from elsewhere).
void say_stopped(const Say& say, const LaunchResult& result, const AttemptDecision& decision, int grace_s) {
  // Workers killed after the grace never wrote the checkpoint of the stop.
  const bool killed = std::any_of(result.workers.begin(), result.workers.end(), [](const WorkerExit& w) {
    return w.signaled && w.status == SIGKILL;
  });
  const std::string what = decision.exit_code == kExitPreempted ? "preempted" : "interrupted";
  if (killed) {
    say(what + ": the workers did not reach a step boundary within distributed.stop_grace_s (" +
        std::to_string(grace_s) + " s) and were killed; run the same command to resume from the "
        "newest checkpoint before (exit " + std::to_string(decision.exit_code) + ")");
  } else {
    say(what + "; run the same command to resume from the checkpoint just written (exit " +
        std::to_string(decision.exit_code) + ")");
  }
}

// After the first attempt or round: the workers continue from this run's
// newest checkpoint, whatever checkpoint.resume said (never, or a path).
void resume_from_newest(const Recipe& recipe, LaunchOptions& opts, bool& added) {
  if (recipe.checkpoint.resume == "auto" || added) return;
  opts.command.push_back("--set");
  opts.command.push_back("checkpoint.resume=auto");
  added = true;
}

std::string plural(int64_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// An elastic job (distributed.nnodes "MIN:MAX"): rounds of the nodes that
// are there (launch/elastic_rendezvous.h), each trained by LocalSupervisor
// until it ends: the job is done, a node asks to join (this node's workers
// stop at a step boundary with a checkpoint), a node failed or left (the
// survivors go on from the newest checkpoint), or this node is stopped.
int run_rounds(const Recipe& recipe, LaunchOptions opts, const Say& say, const std::string& node_name) {
  const auto& d = recipe.distributed;
  const std::string endpoint = d.master_addr + ":" + std::to_string(opts.master_port);
  comm::StorePtr store;
  try {
    store = comm::make_tcp_store(d.master_addr, opts.master_port, /*is_server=*/false, 1,
                                 std::chrono::seconds(d.timeout_s));
  } catch (const std::exception& e) {
    say("cannot reach the elastic job's store at " + endpoint + " (distributed.master_addr, master_port) within " +
        std::to_string(d.timeout_s) + " s (distributed.timeout_s): " + comm::message_of(e));
    return kExitWorkerFailed;
  }
  launch::ElasticOptions eo;
  eo.min_nodes = d.nnodes;
  eo.max_nodes = d.nnodes_max;
  eo.last_call = std::chrono::seconds(d.rdzv_last_call_s);
  eo.timeout = std::chrono::seconds(d.timeout_s);
  eo.node_name = node_name;
  eo.nproc_per_node = d.nproc_per_node;
  // Between rounds (while joining) a signal for this node ends its part:
  // caught by a relay of its own, since LocalSupervisor's exists only
  // while the workers run.
  launch::SignalRelay* relay_now = nullptr;
  eo.interrupted = [&relay_now]() {
    if (relay_now == nullptr) return 0;
    for (int sig : relay_now->drain()) {
      if (sig == SIGINT || sig == SIGTERM || sig == SIGUSR1) return sig;
    }
    return 0;
  };
  launch::ElasticRendezvous rendezvous(store, eo, say);
  int failures = 0;
  bool resume_added = false;
  bool returning = false;
  for (int round = 0;;) {
    launch::RoundMembership m;
    try {
      launch::SignalRelay relay;
      relay_now = &relay;
      struct Forget {
        launch::SignalRelay*& p;
        ~Forget() { p = nullptr; }
      } forget{relay_now};
      m = rendezvous.join(round, returning);
    } catch (const launch::JoinInterrupted& e) {
      say(std::string(e.what()) + "; this node leaves the job (exit " +
          std::to_string(e.signal == SIGINT ? kExitInterrupted : kExitPreempted) + ")");
      return e.signal == SIGINT ? kExitInterrupted : kExitPreempted;
    } catch (const launch::JobEnded& e) {
      say(e.what());
      return e.succeeded ? kExitOk : kExitWorkerFailed;
    } catch (const ConfigError& e) {
      say(e.what());
      return kExitInvalidInput;
    } catch (const std::exception& e) {
      say(comm::message_of(e));
      return kExitWorkerFailed;
    }
    opts.nnodes = m.nnodes;
    opts.node_rank = m.node_rank;
    opts.echo_rank = m.nnodes > 1 && m.node_rank != 0 ? -1 : 0;
    opts.extra_env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(m.round);
    std::string nodes;
    for (size_t i = 0; i < m.nodes.size(); ++i) nodes += (i ? ", " : "") + std::to_string(i) + " " + m.nodes[i];
    say("round " + std::to_string(m.round) + ": " + plural(m.nnodes, "node") + " x " +
        plural(d.nproc_per_node, "worker") + " = " + plural(m.nnodes * d.nproc_per_node, "worker") + " (nodes " +
        nodes + "); this node is node " + std::to_string(m.node_rank) +
        (resume_added || (m.round > 0 && recipe.checkpoint.resume == "auto") ? "; resuming from the newest checkpoint"
                                                                             : ""));
    opts.stop_when = [&rendezvous, r = m.round] { return rendezvous.waiting_after(r); };
    const LaunchResult result = LocalSupervisor(opts).run();
    const AttemptDecision decision = decide_after_attempt(result, failures, d.max_restarts);
    using Reason = AttemptDecision::Reason;
    std::vector<int> ranks;
    for (const auto& w : result.workers) ranks.push_back(w.rank);
    // A round can also fail because a node joined: its workers, stopped as
    // they started, never reached a step, and their peers lost them. That
    // is a join, not a failure to count.
    const bool failed = decision.reason == Reason::kRestartable || decision.reason == Reason::kRestartsExhausted;
    const std::vector<std::string> newcomers = failed ? rendezvous.newcomers_after(m) : std::vector<std::string>{};
    if (!result.stopped_for.empty() && !result.interrupted) {
      // A node asks to join: this node's workers stopped at a step with a checkpoint.
      say("round " + std::to_string(m.round) + " stopped: " + result.stopped_for);
    } else if (!newcomers.empty()) {
      say("round " + std::to_string(m.round) + " ended as " + newcomers.front() +
          " joined (its workers stopped before a step boundary; not counted against distributed.max_restarts)");
    } else {
      switch (decision.reason) {
        case Reason::kSucceeded:
          rendezvous.end(true, "finished in round " + std::to_string(m.round));
          return decision.exit_code;
        case Reason::kInterrupted:
          // This node leaves; the others go on without it.
          say_stopped(say, result, decision, d.stop_grace_s);
          return decision.exit_code;
        case Reason::kStoppedByAgreement:
          // Another node stopped the round: it leaves, or one joins.
          say("round " + std::to_string(m.round) + " stopped at a step with a checkpoint (another node asked)");
          break;
        case Reason::kWouldFailAgain:
          say(result.summary());
          say("not restarting: a restart would fail the same way; logs of every rank are in " + opts.log_dir);
          rendezvous.end(false, "a worker failed with exit code " + std::to_string(decision.exit_code));
          return decision.exit_code;
        case Reason::kRestartsExhausted:
          say(result.summary());
          say("round " + std::to_string(m.round) + " failed, and distributed.max_restarts (" +
              std::to_string(d.max_restarts) + ") rounds after failures have been spent; logs of every rank are in " +
              opts.log_dir);
          rendezvous.end(false, "its workers failed after " + std::to_string(d.max_restarts) + " restarts");
          return decision.exit_code;
        case Reason::kRestartable:
          ++failures;
          say(result.summary());
          say("round " + std::to_string(m.round) + " failed (" + std::to_string(failures) + " of " +
              std::to_string(d.max_restarts) + " restarts): the nodes that remain go on from the newest checkpoint");
          break;
      }
    }
    if (auto problem = keep_attempt_logs(opts.log_dir, m.round, ranks)) say("warning: " + *problem);
    resume_from_newest(recipe, opts, resume_added);
    round = m.round + 1;
    returning = true;
  }
}

}  // namespace

int serve_elastic_store(int port, const Say& say) {
  std::unique_ptr<RendezvousServer> server;
  try {
    server = std::make_unique<RendezvousServer>("127.0.0.1", port);
  } catch (const ConfigError& e) {
    say(e.what());
    return kExitInvalidInput;
  }
  comm::StorePtr client = comm::make_tcp_store("127.0.0.1", server->port(), false, 1, std::chrono::seconds(10));
  // SIGINT and SIGTERM are waited for, not handled: one second at a time,
  // between looks at the store.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigset_t before;
  pthread_sigmask(SIG_BLOCK, &stop, &before);
  say("serving the rendezvous store of an elastic job on port " + std::to_string(server->port()) +
      " (every interface); start each node's bagua run with --rdzv-endpoint THIS_HOST:" +
      std::to_string(server->port()) + ". It stops when the job ends, or on Ctrl-C");
  const timespec second{1, 0};
  for (;;) {
    siginfo_t info;
    if (sigtimedwait(&stop, &info, &second) > 0) {
      say(std::string("stopped by ") + signal_name(info.si_signo));
      break;
    }
    if (launch::elastic_job_ended(client)) {
      // Late joiners read "ended" from it for a little longer.
      std::this_thread::sleep_for(std::chrono::seconds(5));
      say("the elastic job has ended; the store stops");
      break;
    }
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  return kExitOk;
}

int run_agent(const Recipe& recipe, RunAgentOptions options) {
  if (!options.say) options.say = [](const std::string& line) { std::cerr << "bagua run: " << line << "\n"; };
  const auto& say = options.say;
  check_supported(recipe);
  // Bad data fails here, before any worker starts; IDX images inflated for
  // the check stay in memory the workers share (one copy per node).
  static SharedData shared_data;  // lives until exit: the workers outlive this function's scope
  check_data(recipe, &shared_data);
  const auto& d = recipe.distributed;
  const std::string node_name = host_name();
  // An elastic job's nodes are named by host (their ranks change from
  // round to round); a fixed job's by node rank.
  const std::string node = d.elastic() ? "host-" + node_name : "node-" + std::to_string(d.node_rank);
  // Rank 0 records the SHA-256 of the model and data files (provenance.json)
  // while its peers wait on it; hashed here first, a large data set costs
  // the workers nothing (the digests are cached), and no peer times out.
  // Any node of an elastic job may hold rank 0.
  if (d.elastic() || d.node_rank == 0) recipe_provenance(recipe);
  static OutputLock lock;  // held until this process (and its workers) exit
  if (auto busy = lock.acquire(recipe.output.dir, node)) {
    say(*busy);
    return kExitInvalidInput;
  }
  LaunchOptions opts;
  opts.command = options.worker_command;
  opts.nproc_per_node = d.nproc_per_node;
  opts.nnodes = d.nnodes;
  opts.node_rank = d.node_rank;
  opts.master_addr = d.master_addr;
  // One node and no port asked for (recipe or command line): any free
  // port, so two runs on one machine never collide on 29500.
  opts.master_port = (d.nnodes == 1 && !d.elastic() && !d.master_port) ? 0 : d.master_port_or_default();
  // Node 0 serves the rendezvous store for the whole run, restarts
  // included (workers are its clients): the progress watch reads it even
  // when rank 0 is the worker that stopped, and a port in use fails now.
  // In an elastic job the agent on master_addr's machine serves it, the
  // first there to bind the port (the others, and every other node, are
  // its clients): that node must stay for the job's life.
  static std::unique_ptr<RendezvousServer> store;  // lives until exit: the workers outlive this function's scope
  if (d.elastic()) {
    if (launch::is_local_address(d.master_addr)) {
      try {
        store = std::make_unique<RendezvousServer>(d.master_addr, opts.master_port);
        say("elastic job of " + std::to_string(d.nnodes) + " to " + std::to_string(d.nnodes_max) +
            " nodes: this node serves its store on port " + std::to_string(opts.master_port) +
            " (the job lasts as long as this node's bagua run)");
      } catch (const ConfigError&) {
        // Served by another process here (an agent that came first).
      }
    }
  } else if (d.node_rank == 0) {
    try {
      store = std::make_unique<RendezvousServer>(d.master_addr, opts.master_port);
    } catch (const ConfigError& e) {
      say(e.what());
      return kExitInvalidInput;
    }
    opts.master_port = store->port();
  }
  opts.extra_env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  // Stopped when this function returns, however the run ends (a signal that
  // kills bagua outright kills it too: PR_SET_PDEATHSIG).
  std::unique_ptr<RedisServer> cache_server = prepare_cache(recipe, node, opts.extra_env, say);
  if (std::string shared = shared_data.env_value(); !shared.empty()) opts.extra_env[kSharedDataEnv] = shared;
  opts.watch_progress = true;
  opts.stall_timeout = std::chrono::seconds(d.timeout_s);
  opts.stall_warning = std::chrono::seconds(d.stall_warning_s);
  opts.log_dir = (fs::path(recipe.output.dir) / "logs").string();
  opts.echo_rank = 0;
  opts.prefix_output = false;
  opts.threads_per_worker = recipe.train.threads.value_or(0);
  opts.stop_grace = std::chrono::seconds(d.stop_grace_s);  // time for the final checkpoint
  // A rank that found bad input or a diverged loss is the cause, even when a
  // peer that lost its connection to it exits first.
  opts.cause_statuses = {kExitInvalidInput, kExitDiverged};
  opts.extra_env["BAGUA_PROGRESS"] = options.progress_tty ? "tty" : "plain";
  if (d.elastic()) return run_rounds(recipe, opts, say, node_name);
  if (d.nnodes > 1 && d.node_rank != 0) opts.echo_rank = -1;  // rank 0 lives elsewhere; every local rank shows
  bool resume_added = false;
  for (int attempt = 0;; ++attempt) {
    opts.extra_env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(attempt);
    const LaunchResult result = LocalSupervisor(opts).run();
    const AttemptDecision decision = decide_after_attempt(result, attempt, d.max_restarts);
    using Reason = AttemptDecision::Reason;
    switch (decision.reason) {
      case Reason::kSucceeded:
        return decision.exit_code;
      case Reason::kStoppedByAgreement:
      case Reason::kInterrupted:
        say_stopped(say, result, decision, d.stop_grace_s);
        return decision.exit_code;
      case Reason::kWouldFailAgain:
        say(result.summary());
        if (attempt < d.max_restarts) say("not restarting: a restart would fail the same way");
        say("logs of every rank are in " + opts.log_dir);
        return decision.exit_code;
      case Reason::kRestartsExhausted:
        say(result.summary());
        say("logs of every rank are in " + opts.log_dir);
        return decision.exit_code;
      case Reason::kRestartable:
        break;
    }
    say(result.summary());
    if (auto problem = keep_attempt_logs(opts.log_dir, attempt)) say("warning: " + *problem);
    say("restarting all workers (" + std::to_string(attempt + 1) + " of " + std::to_string(d.max_restarts) +
        ") from the latest checkpoint; the logs of this attempt are in " + opts.log_dir + "/attempt-" +
        std::to_string(attempt));
    resume_from_newest(recipe, opts, resume_added);
  }
}

}  // namespace bagua
