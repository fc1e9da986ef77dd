// bagua run: validate a recipe, then either launch its workers on this node
// (and restart them from the latest checkpoint when asked), or, when this
// process already is a worker (torchrun/Kubernetes or Slurm variables set),
// train as that worker.
#include "command.h"

#include <bagua/data.h>
#include <bagua/errors.h>
#include <bagua/launch.h>
#include <bagua/recipe.h>
#include <bagua/redis_server.h>
#include <bagua/trainer.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

namespace bagua::cli {
namespace {

struct RunFlags {
  std::string recipe;
  std::vector<std::string> overrides;
  std::optional<int> nproc_per_node, nnodes, node_rank, master_port;
  std::optional<std::string> master_addr;
  bool trace = false;
};

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

// Tasks on this node, from SLURM_TASKS_PER_NODE ("3,2" or "2(x3),1", one
// entry per node in node order) and SLURM_NODEID; else SLURM_NTASKS_PER_NODE.
std::optional<int> slurm_tasks_on_this_node() {
  const char* layout = std::getenv("SLURM_TASKS_PER_NODE");
  const char* node = std::getenv("SLURM_NODEID");
  if (layout && *layout && node && *node) {
    int want = std::atoi(node), index = 0;
    std::string text = layout;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t comma = text.find(',', pos);
      std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      int count = std::atoi(item.c_str()), repeat = 1;
      if (auto x = item.find("(x"); x != std::string::npos) repeat = std::atoi(item.c_str() + x + 2);
      if (want < index + repeat) return count;
      index += repeat;
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  if (env_set("SLURM_NTASKS_PER_NODE")) return std::atoi(std::getenv("SLURM_NTASKS_PER_NODE"));
  return std::nullopt;
}

// Slurm starts one task per worker: translate its variables to torchrun's.
void adopt_slurm(const Recipe& recipe) {
  auto get = [](const char* n) { return std::string(std::getenv(n)); };
  setenv("RANK", get("SLURM_PROCID").c_str(), 1);
  setenv("WORLD_SIZE", get("SLURM_NTASKS").c_str(), 1);
  if (env_set("SLURM_LOCALID")) setenv("LOCAL_RANK", get("SLURM_LOCALID").c_str(), 1);
  if (auto here = slurm_tasks_on_this_node()) {
    setenv("LOCAL_WORLD_SIZE", std::to_string(*here).c_str(), 1);
  }
  if (env_set("SLURM_NODEID")) setenv("GROUP_RANK", get("SLURM_NODEID").c_str(), 1);
  if (!env_set("MASTER_ADDR")) setenv("MASTER_ADDR", recipe.distributed.master_addr.c_str(), 1);
  if (!env_set("MASTER_PORT")) setenv("MASTER_PORT", std::to_string(recipe.distributed.master_port_or_default()).c_str(), 1);
}

// One run at a time in an output directory (per node: the nodes of one job
// may share it). An flock on OUTPUT/.bagua-run-node-R.lock, held by this
// process and inherited by its workers, so it is released only when the
// last of them is gone; the file names the holder for whoever finds it held.
class OutputLock {
 public:
  // Returns an error message when another run holds the directory.
  std::optional<std::string> acquire(const std::filesystem::path& dir, int node_rank) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return "cannot create the output directory " + dir.string() + ": " + ec.message();
    path_ = dir / (".bagua-run-node-" + std::to_string(node_rank) + ".lock");
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
    char host[256] = "?";
    ::gethostname(host, sizeof(host) - 1);
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

 private:
  std::filesystem::path path_;
  int fd_ = -1;  // kept open for the life of the process
};

// Before a restart: this attempt's logs move to LOG_DIR/attempt-K/, so
// every attempt's are kept and LOG_DIR/rank-N.log is always the newest's.
void keep_attempt_logs(const std::filesystem::path& log_dir, int attempt) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path kept = log_dir / ("attempt-" + std::to_string(attempt));
  fs::create_directories(kept, ec);
  for (const auto& entry : fs::directory_iterator(log_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.rfind("rank-", 0) == 0 && entry.path().extension() == ".log") {
      fs::rename(entry.path(), kept / name, ec);
    }
  }
  if (ec) std::cerr << "bagua run: warning: could not keep the logs of attempt " << attempt << ": " << ec.message() << "\n";
}

// data.cache, before any worker starts. hosts null: this node's own
// redis-server, bound to 127.0.0.1 (only this node's workers use it), with a
// fresh password; the returned owner stops it when the run ends, and the
// workers learn where it is and its password from `env`. Listed hosts: each
// must answer AUTH and PING now (else a user Error naming host:port).
std::unique_ptr<RedisServer> prepare_cache(const Recipe& recipe, std::map<std::string, std::string>& env) {
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
  const auto log_dir = std::filesystem::path(recipe.output.dir) / "logs";
  std::filesystem::create_directories(log_dir);
  options.log_path = (log_dir / ("redis-node-" + std::to_string(recipe.distributed.node_rank) + ".log")).string();
  auto server = std::make_unique<RedisServer>(options);
  const CacheHost host = server->host();
  env[kRedisHostsEnv] = host.host + ":" + std::to_string(host.port);
  env[kRedisPasswordEnv] = options.password;
  std::cerr << "bagua run: data.cache: started redis-server (pid " << server->pid() << ") on " << host.host << ":"
            << host.port << ", maxmemory " << cache.capacity_per_node << " bytes; its log: " << options.log_path
            << "\n";
  return server;
}

int run_as_worker(const Recipe& recipe) {
  TrainOutcome outcome = run_worker(recipe);
  return outcome.stopped ? kExitInterrupted : kExitOk;
}

int launch_workers(const Recipe& recipe, const RunFlags& flags) {
  check_supported(recipe);
  // Bad data fails here, before any worker starts; IDX images inflated for
  // the check stay in memory the workers share (one copy per node).
  static SharedData shared_data;  // lives until exit: the workers outlive this function's scope
  check_data(recipe, &shared_data);
  const auto& d = recipe.distributed;
  static OutputLock lock;  // held until this process (and its workers) exit
  if (auto busy = lock.acquire(recipe.output.dir, d.node_rank)) {
    std::cerr << "bagua run: " << *busy << "\n";
    return kExitInvalidInput;
  }
  LaunchOptions opts;
  opts.command = {self_exe(), "run", flags.recipe};
  for (const auto& o : flags.overrides) {
    opts.command.push_back("--set");
    opts.command.push_back(o);
  }
  opts.nproc_per_node = d.nproc_per_node;
  opts.nnodes = d.nnodes;
  opts.node_rank = d.node_rank;
  opts.master_addr = d.master_addr;
  // One node and no port asked for (recipe or command line): any free
  // port, so two runs on one machine never collide on 29500.
  opts.master_port = (d.nnodes == 1 && !d.master_port) ? 0 : d.master_port_or_default();
  // Node 0 serves the rendezvous store for the whole run, restarts
  // included (workers are its clients): the progress watch reads it even
  // when rank 0 is the worker that stopped, and a port in use fails now.
  static std::unique_ptr<RendezvousServer> store;  // lives until exit: the workers outlive this function's scope
  if (d.node_rank == 0) {
    try {
      store = std::make_unique<RendezvousServer>(d.master_addr, opts.master_port);
    } catch (const ConfigError& e) {
      std::cerr << "bagua run: " << e.what() << "\n";
      return kExitInvalidInput;
    }
    opts.master_port = store->port();
  }
  opts.extra_env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  // Stopped when this function returns, however the run ends (a signal that
  // kills bagua outright kills it too: PR_SET_PDEATHSIG).
  std::unique_ptr<RedisServer> cache_server = prepare_cache(recipe, opts.extra_env);
  if (std::string shared = shared_data.env_value(); !shared.empty()) opts.extra_env[kSharedDataEnv] = shared;
  opts.watch_progress = true;
  opts.stall_timeout = std::chrono::seconds(d.timeout_s);
  opts.stall_warning = std::chrono::seconds(d.stall_warning_s);
  opts.log_dir = (std::filesystem::path(recipe.output.dir) / "logs").string();
  opts.echo_rank = 0;
  opts.prefix_output = false;
  opts.threads_per_worker = recipe.train.threads.value_or(0);
  opts.stop_grace = std::chrono::seconds(30);  // time for the final checkpoint
  // A rank that found bad input or a diverged loss is the cause, even when a
  // peer that lost its connection to it exits first.
  opts.cause_statuses = {kExitInvalidInput, kExitDiverged};
  opts.extra_env["BAGUA_PROGRESS"] = isatty(STDERR_FILENO) ? "tty" : "plain";
  if (d.nnodes > 1 && d.node_rank != 0) opts.echo_rank = -1;  // rank 0 lives elsewhere; every local rank shows
  for (int attempt = 0;; ++attempt) {
    opts.extra_env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(attempt);
    LaunchResult result = LocalSupervisor(opts).run();
    if (result.ok) return kExitOk;
    // Workers exit 130 after stopping at an agreed step with a checkpoint:
    // a signal reached this node or, in a multi-node run, another one.
    const bool stopped_by_agreement = result.first_failure && !result.first_failure->signaled &&
                                      result.first_failure->status == kExitInterrupted;
    if (result.interrupted || stopped_by_agreement) {
      std::cerr << "bagua run: interrupted; run the same command to resume from the latest checkpoint"
                << (stopped_by_agreement ? "" : " (if the workers finished writing one within 30 s)") << "\n";
      return kExitInterrupted;
    }
    std::cerr << "bagua run: " << result.summary() << "\n";
    // A worker that found bad input (2) or a diverged training (4) would
    // find it again: no restart, and its exit code is the run's.
    const int cause = result.first_failure && !result.first_failure->signaled ? result.first_failure->status : -1;
    if (cause == kExitInvalidInput || cause == kExitDiverged) {
      if (attempt < d.max_restarts) std::cerr << "bagua run: not restarting: a restart would fail the same way\n";
      std::cerr << "bagua run: logs of every rank are in " << opts.log_dir << "\n";
      return cause;
    }
    if (attempt >= d.max_restarts) {
      std::cerr << "bagua run: logs of every rank are in " << opts.log_dir << "\n";
      return kExitWorkerFailed;
    }
    keep_attempt_logs(opts.log_dir, attempt);
    std::cerr << "bagua run: restarting all workers (" << attempt + 1 << " of " << d.max_restarts
              << ") from the latest checkpoint; the logs of this attempt are in " << opts.log_dir << "/attempt-"
              << attempt << "\n";
    if (recipe.checkpoint.resume != "auto" && attempt == 0) {
      // never, or a fixed path: a restart continues from this run's newest checkpoint.
      opts.command.push_back("--set");
      opts.command.push_back("checkpoint.resume=auto");
    }
  }
}

const CommandRegistration kRun{
    "run", "Train from a recipe: launch the workers, or be one",
    [](CLI::App& sub) -> CommandRunner {
      auto f = std::make_shared<RunFlags>();
      sub.add_option("recipe", f->recipe, "Recipe file (YAML)")->required();
      sub.add_option("--set", f->overrides, "Override a recipe key: key.path=value (value parsed as YAML); repeatable")
          ->type_name("KEY=VALUE")->allow_extra_args(false);
      sub.add_option("--nproc-per-node", f->nproc_per_node, "Workers on this node (distributed.nproc_per_node)");
      sub.add_option("--nnodes", f->nnodes, "Nodes in the job (distributed.nnodes)");
      sub.add_option("--node-rank", f->node_rank, "This node's index (distributed.node_rank)");
      sub.add_option("--master-addr", f->master_addr, "Rendezvous host, node 0 (distributed.master_addr)");
      sub.add_option("--master-port", f->master_port,
                     "Rendezvous port (distributed.master_port); on one node a free port unless one is given here or in the recipe");
      sub.add_flag("--trace", f->trace,
                   "Write a per-step trace of each rank (OUTPUT/trace/rank-N.json, for Perfetto or chrome://tracing); "
                   "same as --set output.trace=true");
      sub.footer(
          "Validates the recipe (as `bagua validate` does) and checks its data, then starts\n"
          "distributed.nproc_per_node workers here. Rank 0's output shows on the terminal; every\n"
          "rank's goes to OUTPUT/logs/rank-N.log. If RANK and WORLD_SIZE (torchrun, a Kubernetes\n"
          "PyTorchJob) or SLURM_PROCID and SLURM_NTASKS are set, this process trains as that one\n"
          "worker instead. Ctrl-C stops every worker after a checkpoint; the same command resumes.\n\n"
          "Exit status: 0 done, 2 invalid recipe or data, output directory or port in use, 3 a worker failed\n"
          "(its rank, cause and last log lines are printed), 4 the training diverged (a NaN or\n"
          "infinite loss or gradient, train.on_nonfinite: stop), 130 interrupted, 1 internal failure.\n"
          "Workers exit with bagua run: if it is killed, they are too. A worker that stops making\n"
          "progress is named (warnings after distributed.stall_warning_s) and ends the job after\n"
          "distributed.timeout_s; a failure on one node stops the others.\n\n"
          "Examples:\n"
          "  bagua run recipes/fashion-mnist-mlp.yaml\n"
          "  bagua run recipes/fashion-mnist-mlp.yaml --nproc-per-node 4 --set train.epochs=1\n"
          "  # two machines; on each, with its own --node-rank (the workers' Gloo binds to the\n"
          "  # interface that routes to --master-addr; GLOO_SOCKET_IFNAME overrides; docs/multi-node.md):\n"
          "  bagua run recipe.yaml --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500\n");
      return [f]() -> int {
        if (f->trace) f->overrides.push_back("output.trace=true");  // the workers get it too
        std::vector<std::string> overrides = f->overrides;
        auto flag = [&](const char* key, const std::string& value) {
          overrides.push_back(std::string("distributed.") + key + "=" + value);
        };
        if (f->nproc_per_node) flag("nproc_per_node", std::to_string(*f->nproc_per_node));
        if (f->nnodes) flag("nnodes", std::to_string(*f->nnodes));
        if (f->node_rank) flag("node_rank", std::to_string(*f->node_rank));
        if (f->master_addr) flag("master_addr", "'" + *f->master_addr + "'");
        if (f->master_port) flag("master_port", std::to_string(*f->master_port));
        const bool worker = env_set("RANK") && env_set("WORLD_SIZE");
        const bool slurm = !worker && env_set("SLURM_PROCID") && env_set("SLURM_NTASKS");
        Recipe recipe;
        try {
          RecipeLoadOptions lo;
          lo.check_files = !worker;  // the launcher checked them
          recipe = load_recipe(f->recipe, overrides, lo);
        } catch (const RecipeError& e) {
          return report_invalid_recipe(e, f->recipe);
        }
        if (!worker) {
          for (const auto& note : recipe.notes) std::cerr << note.to_string() << " (note)\n";
        }
        if (slurm) adopt_slurm(recipe);
        if (worker || slurm) return run_as_worker(recipe);
        RunFlags resolved = *f;
        resolved.overrides = overrides;
        return launch_workers(recipe, resolved);
      };
    }};

}  // namespace
}  // namespace bagua::cli
