// The run agent of one node (bagua/run_agent.h): what it holds for the
// run, and its one loop of rounds.
#include <bagua/provenance.h>
#include <bagua/run_agent.h>

#include <bagua/data.h>
#include <bagua/errors.h>
#include <bagua/redis_server.h>
#include <bagua/system.h>
#include <bagua/preflight.h>

#include "comm/c10d_compat.h"
#include "launch/elastic_rendezvous.h"
#include "launch/node_rendezvous.h"
#include "launch/signal_relay.h"
#include "launch/test_hold.h"
#include "train/checkpoint_files.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <iostream>
#include <map>
#include <memory>
#include <thread>

namespace bagua {

namespace fs = std::filesystem;

namespace {

using Say = std::function<void(const std::string&)>;

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

// Whether a complete checkpoint in OUTPUT/checkpoints was written since `since`.
bool checkpoint_written_since(const Recipe& recipe, fs::file_time_type since) {
  std::error_code ec;
  for (const auto& [step, dir] : train::complete_checkpoints((fs::path(recipe.output.dir) / "checkpoints").string())) {
    const auto when = fs::last_write_time(dir / "meta.json", ec);
    if (!ec && when >= since) return true;
  }
  return false;
}

// What the agent says when its workers stopped at a step together (a
// signal here, or a stop that reached them from elsewhere). `wrote`: the
// stop's checkpoint is there (false when the workers were stopped before
// training began, during their start-up, so there is nothing new).
void say_stopped(const Say& say, const LaunchResult& result, const AttemptDecision& decision, int grace_s,
                 bool wrote) {
  // Workers killed after the grace never wrote the checkpoint of the stop.
  const bool killed = std::any_of(result.workers.begin(), result.workers.end(), [](const WorkerExit& w) {
    return w.signaled && w.status == SIGKILL;
  });
  const std::string what = decision.exit_code == kExitPreempted ? "preempted" : "interrupted";
  if (!wrote) {
    say(what + " before the workers wrote a checkpoint (they had not begun training); run the same command to "
        "start again" + std::string(" (exit ") + std::to_string(decision.exit_code) + ")");
  } else if (killed) {
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

// What the agent holds for the whole run, restarts included, released
// when run_agent() returns (by then every worker has exited).
struct RunHolds {
  SharedData shared_data;  // IDX images inflated by the data check, mapped by the workers
  OutputLock lock;
  std::unique_ptr<RendezvousServer> store;
  std::unique_ptr<RedisServer> cache_server;
};

// The round line of an elastic job: who trains, and this node's rank.
void say_round(const Say& say, const launch::RoundMembership& m, int nproc_per_node, bool resuming) {
  std::string nodes;
  for (size_t i = 0; i < m.nodes.size(); ++i) nodes += (i ? ", " : "") + std::to_string(i) + " " + m.shown(i);
  say("round " + std::to_string(m.round) + ": " + plural(m.nnodes, "node") + " x " +
      plural(nproc_per_node, "worker") + " = " + plural(m.nnodes * nproc_per_node, "worker") + " (nodes " + nodes +
      "); this node is node " + std::to_string(m.node_rank) +
      (resuming ? "; resuming from the newest checkpoint" : ""));
}

// The agent's loop: rendezvous, the workers under LocalSupervisor until
// they end, the policy, and then the end or the next round.
int run_rounds(const Recipe& recipe, LaunchOptions opts, launch::NodeRendezvous& rendezvous, const Say& say) {
  using Reason = AttemptDecision::Reason;
  const auto& d = recipe.distributed;
  const bool elastic = rendezvous.elastic();
  bool resume_added = false;
  bool returning = false;
  for (int round = 0;;) {
    const launch::NodeRendezvous::Next next = rendezvous.next_round(round, returning);
    if (!next.round) return next.exit_code;
    const launch::RoundMembership& m = *next.round;
    // A round after the first continues the job from its newest checkpoint,
    // on every node: a node's history does not decide it (a newcomer, whose
    // first round this is, is often rank 0, which picks the checkpoint; with
    // the recipe's resume: PATH or never it rolled the job back or moved its
    // checkpoints aside).
    if (m.round > 0) resume_from_newest(recipe, opts, resume_added);
    opts.nnodes = m.nnodes;
    opts.node_rank = m.node_rank;
    // Rank 0's output, or every local rank's when rank 0 lives on another node.
    opts.echo_rank = m.nnodes > 1 && m.node_rank != 0 ? -1 : 0;
    opts.extra_env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(m.round);
    opts.stop_when = rendezvous.stop_when(m.round);
    if (elastic) {
      say_round(say, m, d.nproc_per_node,
                resume_added || (m.round > 0 && recipe.checkpoint.resume == "auto"));
    }
    const auto attempt_began = fs::file_time_type::clock::now();
    const LaunchResult result = LocalSupervisor(opts).run();
    const auto ended = std::chrono::steady_clock::now();
    // Restarts spent: the job's failed rounds (one count in an elastic job's
    // store, the same on every node).
    int failures = rendezvous.failures(m.round);
    const AttemptDecision attempt = decide_after_attempt(result, failures, d.max_restarts);
    MembershipNews news;
    news.can_change = elastic;
    if (elastic && attempt.failed()) {
      news.newcomers = rendezvous.newcomers_after(m);
      if (news.newcomers.empty()) news.lost = rendezvous.lost_after(m, ended);
    }
    const AttemptDecision decision = decide_after_round(result, attempt, news);
    const std::string r = "round " + std::to_string(m.round);
    switch (decision.reason) {
      case Reason::kSucceeded:
        rendezvous.end(true, "finished in " + r);
        return decision.exit_code;
      case Reason::kInterrupted:  // an elastic job's other nodes go on without this one
      case Reason::kStoppedByAgreement:
        // Rank 0 writes the checkpoints: another node's output directory
        // may not show them, so only node 0 looks.
        say_stopped(say, result, decision, d.stop_grace_s,
                    m.node_rank != 0 || checkpoint_written_since(recipe, attempt_began));
        return decision.exit_code;
      case Reason::kWouldFailAgain:
        say(result.summary());
        if (elastic) {
          say("not restarting: a restart would fail the same way; logs of every rank are in " + opts.log_dir);
        } else {
          if (failures < d.max_restarts) say("not restarting: a restart would fail the same way");
          say("logs of every rank are in " + opts.log_dir);
        }
        rendezvous.end(false, "a worker failed with exit code " + std::to_string(decision.exit_code));
        return decision.exit_code;
      case Reason::kRestartsExhausted:
        say(result.summary());
        if (elastic) {
          say(r + " failed, and distributed.max_restarts (" + std::to_string(d.max_restarts) +
              ") rounds after failures have been spent; logs of every rank are in " + opts.log_dir);
        } else {
          say("logs of every rank are in " + opts.log_dir);
        }
        rendezvous.end(false, "its workers failed after " + std::to_string(d.max_restarts) + " restarts");
        return decision.exit_code;
      case Reason::kRestartable:
        failures = rendezvous.count_failure(m.round);
        say(result.summary());
        if (elastic) {
          say(r + " failed (" + std::to_string(failures) + " of " + std::to_string(d.max_restarts) +
              " restarts): the nodes that remain go on from the newest checkpoint");
        }
        break;
      case Reason::kNodeWaiting:
        say(r + " stopped: " + result.stopped_for);
        break;
      case Reason::kNodeJoined:
        say(r + " ended as " + news.newcomers.front() +
            " joined (its workers stopped before a step boundary; not counted against distributed.max_restarts)");
        break;
      case Reason::kOtherNodeStopped:
        say(r + " stopped at a step with a checkpoint (another node asked)");
        break;
      case Reason::kNodeLost: {
        std::string lost;
        for (const auto& n : news.lost) lost += (lost.empty() ? "" : ", ") + n;
        say(r + " ended as " + lost + (news.lost.size() == 1 ? " was" : " were") +
            " lost (left, or stopped answering); the nodes that remain go on from the newest checkpoint "
            "(not counted against distributed.max_restarts)");
        break;
      }
    }
    // The next round: this one's logs kept (this node's ranks), resumed
    // from the newest checkpoint.
    std::vector<int> ranks;
    for (const auto& w : result.workers) ranks.push_back(w.rank);
    if (auto problem = keep_attempt_logs(opts.log_dir, m.round, ranks)) say("warning: " + *problem);
    if (!elastic) {
      say("restarting all workers (" + std::to_string(failures) + " of " + std::to_string(d.max_restarts) +
          ") from the latest checkpoint; the logs of this attempt are in " + opts.log_dir + "/attempt-" +
          std::to_string(m.round));
    }
    resume_from_newest(recipe, opts, resume_added);
    round = m.round + 1;
    returning = true;
  }
}

}  // namespace

int serve_elastic_store(int port, const Say& say, std::chrono::seconds idle) {
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
      std::to_string(server->port()) + ". It stops when the job ends, when every node has left for " +
      std::to_string(idle.count()) + " s, or on Ctrl-C");
  // The nodes' keep-alives, watched as a member watches its round's: a job
  // whose every node left (interrupted, refused, killed) without marking
  // its end would otherwise keep its store for ever.
  launch::KeepAlive watch(
      [port = server->port()] { return comm::make_tcp_store("127.0.0.1", port, false, 1, std::chrono::seconds(5)); },
      "bagua-store#" + random_secret().substr(0, 6));
  // When every node was first seen gone; the epoch (a default time point)
  // while some node answers. (Not a std::optional: GCC 12 warns, wrongly,
  // that its value may be read uninitialized.)
  std::chrono::steady_clock::time_point empty_since{};
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
    std::vector<std::string> agents;
    try {
      agents = launch::registered_agents(client);
    } catch (const std::exception&) {
    }
    watch.watch(agents);
    const bool empty = !agents.empty() && watch.lapsed().size() == agents.size();
    if (!empty) {
      empty_since = {};
    } else if (empty_since == std::chrono::steady_clock::time_point{}) {
      empty_since = std::chrono::steady_clock::now();
    } else if (std::chrono::steady_clock::now() - empty_since >= idle) {
      say("every node of the elastic job (" + std::to_string(agents.size()) + ") has left or stopped answering, for " +
          std::to_string(idle.count()) + " s, and the job never marked its end; the store stops");
      launch::ElasticRendezvous(client, {}, [](const std::string&) {}).end(false, "every node left");
      break;
    }
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  return kExitOk;
}

int run_agent(const Recipe& recipe, RunAgentOptions options) {
  if (!options.say) options.say = [](const std::string& line) { std::cerr << "bagua run: " << line << "\n"; };
  const auto& say = options.say;
  // The agent's one signal relay, in force until it returns (declared
  // first, so released last): no signal falls between the checks, the
  // rendezvous and the workers. Before any worker starts, a signal ends
  // the run at the next step below with its documented exit code (SIGTERM
  // killed it with 143 before, silently).
  launch::SignalRelay relay;
  auto stopped = [&]() -> std::optional<int> {
    const int sig = relay.take_stop();
    if (sig == 0) return std::nullopt;
    const int code = sig == SIGINT ? kExitInterrupted : kExitPreempted;
    say(std::string(sig == SIGINT ? "interrupted" : "preempted") + " by " + signal_name(sig) +
        " before any worker started (nothing trained); run the same command to start (exit " +
        std::to_string(code) + ")");
    return code;
  };
  launch::hold_for_test("preflight");
  if (auto code = stopped()) return *code;
  RunHolds holds;
  check_supported(recipe);
  // Bad data fails here, before any worker starts; IDX images inflated for
  // the check stay in memory the workers share (one copy per node).
  check_data(recipe, &holds.shared_data);
  if (auto code = stopped()) return *code;
  // A model that is not TorchScript, or that cannot take this data or give
  // this loss its output, fails here in one line (its traceback in the logs).
  check_model(recipe, (fs::path(recipe.output.dir) / "logs" / "preflight.log").string(), &holds.shared_data);
  if (auto code = stopped()) return *code;
  const auto& d = recipe.distributed;
  const std::string node_name = host_name();
  // In an elastic job's membership this agent is its host name and a
  // random suffix: agents that share a host name (containers on the host's
  // network, two slurmd on one machine) are distinct nodes.
  const std::string node_id = node_name + "#" + random_secret().substr(0, 6);
  // Rank 0 records the SHA-256 of the model and data files (provenance.json)
  // while its peers wait on it; hashed here first, a large data set costs
  // the workers nothing (the digests are cached), and no peer times out.
  // Any node of an elastic job may hold rank 0.
  if (d.elastic() || d.node_rank == 0) {
    // The output directory's run: another recipe's, or one the workers
    // would refuse to resume, is refused here, once; a finished one is left
    // as it is (one node: a job of several would leave the others waiting).
    const OutputDirCheck output = check_output_dir(recipe, recipe_provenance(recipe));
    // An elastic job's node that comes after the job finished (a late or
    // replacement pod; its store may be gone): done, exit 0, as the
    // Kubernetes examples promise.
    if (output.finished_at && d.elastic()) {
      say("the elastic job in " + recipe.output.dir + " is already complete at step " +
          std::to_string(*output.finished_at) + ": this node has nothing to train, and leaves");
      return kExitOk;
    }
    if (output.finished_at && d.nnodes == 1 && !d.elastic()) {
      say("already complete at step " + std::to_string(*output.finished_at) +
          ": nothing trained, nothing changed; the model is " + (fs::path(recipe.output.dir) / "model.pt").string());
      // Which limit ended it: max_steps when the run stopped there, else the
      // epochs (a raised max_steps alone would train nothing more).
      const bool by_max_steps = recipe.train.max_steps && *recipe.train.max_steps == *output.finished_at;
      say(std::string("to train further, raise ") + (by_max_steps ? "train.max_steps" : "train.epochs") +
          (recipe.train.early_stop ? " (or change train.early_stop)" : "") +
          "; to start afresh, set checkpoint.resume: never or another output.dir");
      return kExitOk;
    }
  }
  if (auto code = stopped()) return *code;
  // The output directory's lock of this node: a fixed job's by node rank;
  // an elastic job's by host (its ranks change from round to round), the
  // first free of nnodes_max slots, as agents of one job may share a host name.
  std::string node;
  std::optional<std::string> busy;
  for (int slot = 1; slot == 1 || (busy && slot <= d.nnodes_max); ++slot) {
    node = !d.elastic() ? "node-" + std::to_string(d.node_rank)
                        : "host-" + node_name + (slot == 1 ? "" : "." + std::to_string(slot));
    busy = holds.lock.acquire(recipe.output.dir, node);
    if (!d.elastic()) break;
  }
  if (busy) {
    say(*busy);
    return kExitInvalidInput;
  }
  LaunchOptions opts;
  opts.command = options.worker_command;
  opts.nproc_per_node = d.nproc_per_node;
  opts.nnodes = d.nnodes;
  opts.node_rank = d.node_rank;
  opts.master_addr = d.master_addr;
  opts.master_port = d.master_port_or_default();
  // Node 0 serves the rendezvous store for the whole run, restarts
  // included (workers are its clients): the progress watch reads it even
  // when rank 0 is the worker that stopped, and a port in use fails now.
  // In an elastic job the agent on master_addr's machine serves it, the
  // first there to bind the port (the others, and every other node, are
  // its clients): that node must stay for the job's life.
  if (d.elastic()) {
    if (launch::is_local_address(d.master_addr)) {
      try {
        holds.store = std::make_unique<RendezvousServer>(d.master_addr, opts.master_port);
        say("elastic job of " + std::to_string(d.nnodes) + " to " + std::to_string(d.nnodes_max) +
            " nodes: this node serves its store on port " + std::to_string(opts.master_port) +
            " (the job lasts as long as this node's bagua run)");
      } catch (const ConfigError&) {
        // Served by another process here (an agent that came first).
      }
    }
  } else if (d.node_rank == 0) {
    try {
      // One node and no port asked for: the store is a file of the run's,
      // so nothing of the run listens beyond loopback (Gloo binds there).
      if (d.nnodes == 1 && !d.master_port) {
        holds.store = RendezvousServer::private_file();
        opts.store_file = holds.store->file();
      } else {
        holds.store = std::make_unique<RendezvousServer>(d.master_addr, opts.master_port);
      }
    } catch (const ConfigError& e) {
      say(e.what());
      return kExitInvalidInput;
    }
    opts.master_port = holds.store->port();
  }
  opts.extra_env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  // Stopped when this function returns, however the run ends (a signal that
  // kills bagua outright kills it too: PR_SET_PDEATHSIG).
  holds.cache_server = prepare_cache(recipe, node, opts.extra_env, say);
  if (std::string shared = holds.shared_data.env_value(); !shared.empty()) opts.extra_env[kSharedDataEnv] = shared;
  opts.watch_progress = true;
  opts.stall_timeout = std::chrono::seconds(d.timeout_s);
  opts.stall_warning = std::chrono::seconds(d.stall_warning_s);
  opts.log_dir = (fs::path(recipe.output.dir) / "logs").string();
  opts.prefix_output = false;
  opts.threads_per_worker = recipe.train.threads.value_or(0);
  opts.stop_grace = std::chrono::seconds(d.stop_grace_s);  // time for the final checkpoint
  // A rank that found bad input or a diverged loss is the cause, even when a
  // peer that lost its connection to it exits first.
  opts.cause_statuses = {kExitInvalidInput, kExitDiverged};
  opts.extra_env["BAGUA_PROGRESS"] = options.progress_tty ? "tty" : "plain";
  if (auto code = stopped()) return *code;
  const std::unique_ptr<launch::NodeRendezvous> rendezvous =
      launch::make_node_rendezvous(recipe, opts.master_port, node_name, node_id, say);
  return run_rounds(recipe, opts, *rendezvous, say);
}

}  // namespace bagua
