// The agent of `bagua bench` (bagua/bench.h): checks, the emulated network,
// the workers under LocalSupervisor, the summary; and a worker's files.
#include <bagua/algorithms/registry.h>
#include <bagua/bench.h>
#include <bagua/errors.h>
#include <bagua/exit_codes.h>
#include <bagua/launch.h>
#include <bagua/preflight.h>

#include "bench/emulated_network.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

namespace bagua {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A temporary directory removed with this object.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "bagua-bench-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw Error("cannot create a temporary directory in " + tmpl);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

// The algorithms to measure: those asked for, each known and implemented,
// after the baseline when they leave it out (`baseline_added`); or every
// implemented one.
// Options are refused with an InvalidArgument naming the flag.
std::vector<std::string> checked_algorithms(const std::vector<std::string>& asked, bool& baseline_added) {
  std::vector<std::string> algorithms = asked;
  baseline_added = false;
  if (algorithms.empty()) {
    for (const auto& d : algorithm_catalog()) {
      if (algorithm_implemented(d.name)) algorithms.push_back(d.name);
    }
  } else if (std::find(algorithms.begin(), algorithms.end(), bench::kBaseline) == algorithms.end()) {
    algorithms.insert(algorithms.begin(), bench::kBaseline);
    baseline_added = true;
  }
  for (const auto& a : algorithms) {
    if (find_algorithm(a) == nullptr || !algorithm_implemented(a)) {
      std::string known;
      for (const auto& r : algorithm_catalog()) known += (known.empty() ? "" : ", ") + r.name;
      throw InvalidArgument("--algorithm " + a + ": no such algorithm; known: " + known);
    }
  }
  return algorithms;
}

// "RANK:FACTOR" into the spec, RANK a rank of `world`.
void set_straggler(const std::string& text, int world, BenchSpec& spec) {
  const auto colon = text.find(':');
  char* end1 = nullptr;
  char* end2 = nullptr;
  const std::string r = text.substr(0, colon), x = colon == std::string::npos ? "" : text.substr(colon + 1);
  const long rank = std::strtol(r.c_str(), &end1, 10);
  const double factor = std::strtod(x.c_str(), &end2);
  if (colon == std::string::npos || r.empty() || x.empty() || *end1 != '\0' || *end2 != '\0' || rank < 0 ||
      rank >= world || !(factor >= 1) || factor > 1000) {
    throw InvalidArgument("--straggler " + text + ": expected RANK:FACTOR with 0 <= RANK < " + std::to_string(world) +
                          " and FACTOR from 1 to 1000, e.g. 1:2 (rank 1's compute twice as slow)");
  }
  spec.straggler_rank = static_cast<int>(rank);
  spec.straggler_factor = factor;
}

std::string plural(int64_t n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

}  // namespace

// The workers on this node, the nodes and this node's rank, from the
// options and their defaults.
struct Layout {
  int nproc = 2, nnodes = 1, node_rank = 0;
  bool baseline_added = false;  // --algorithm left out bench::kBaseline
  int world() const { return nproc * nnodes; }
};

Layout checked_options(BenchOptions& o) {
  BenchSpec& spec = o.spec;
  Layout l;
  spec.algorithms = checked_algorithms(spec.algorithms, l.baseline_added);
  const std::optional<Recipe>& recipe = o.recipe;
  if (!recipe && !spec.overrides.empty()) throw InvalidArgument("--set needs a recipe to change");
  l.nproc = o.nproc_per_node.value_or(recipe ? recipe->distributed.nproc_per_node : 2);
  l.nnodes = o.nnodes.value_or(recipe ? recipe->distributed.nnodes : 1);
  l.node_rank = o.node_rank.value_or(0);
  if (l.nproc < 1 || l.nnodes < 1 || l.node_rank < 0 || l.node_rank >= l.nnodes) {
    throw InvalidArgument("--nproc-per-node and --nnodes must be at least 1, and --node-rank below --nnodes");
  }
  if (!o.straggler.empty()) set_straggler(o.straggler, l.world(), spec);
  if (!o.link.empty() && l.nnodes > 1) {
    throw InvalidArgument("--link emulates the network between the workers of one machine; with --nnodes the network "
                          "is real");
  }
  if (!o.link.empty() && !bench::EmulatedNetwork::valid_rate(o.link)) {
    throw InvalidArgument("--link " + o.link + ": not a rate; give a number and a unit: 1gbit, 500mbit, 100mbps, ...");
  }
  return l;
}

BenchOutcome run_bench(BenchOptions o) {
  if (!o.say) o.say = [](const std::string& line) { std::cerr << "bagua bench: " << line << "\n"; };
  const auto& say = o.say;
  BenchOutcome outcome;
  Layout layout;
  try {
    layout = checked_options(o);
  } catch (const InvalidArgument& e) {
    say(e.what());
    outcome.exit_code = kExitInvalidInput;
    return outcome;
  }
  const int nproc = layout.nproc, nnodes = layout.nnodes, node_rank = layout.node_rank, world = layout.world();
  BenchSpec& spec = o.spec;
  const std::optional<Recipe>& recipe = o.recipe;
  if (recipe) {
    check_supported(*recipe);
    check_data(*recipe);
    check_model(*recipe);
  }
  spec.progress_tty = o.progress_tty;

  TempDir work;
  const fs::path spec_path = work.path / "spec.json", result_path = work.path / "result.json";
  std::ofstream(spec_path) << spec.to_json().dump(1) << "\n";

  LaunchOptions opts;
  opts.command = o.worker_command;
  for (const std::string& arg : {std::string("--worker-spec"), spec_path.string(), std::string("--worker-result"),
                                 result_path.string()}) {
    opts.command.push_back(arg);
  }
  opts.nproc_per_node = nproc;
  opts.nnodes = nnodes;
  opts.node_rank = node_rank;
  opts.master_addr = o.master_addr.value_or(recipe ? recipe->distributed.master_addr : "127.0.0.1");
  opts.master_port = o.master_port.value_or(nnodes == 1 ? 0 : DistributedSpec::kDefaultMasterPort);
  opts.echo_rank = nnodes > 1 && node_rank != 0 ? -1 : 0;
  opts.prefix_output = nnodes > 1 && node_rank != 0;
  opts.threads_per_worker = recipe ? recipe->train.threads.value_or(0) : 0;
  opts.cause_statuses = {kExitInvalidInput};  // as bagua run: the rank that found bad input
  opts.log_dir = (work.path / "logs").string();
  std::unique_ptr<bench::EmulatedNetwork> network;
  if (!o.link.empty()) {
    network = std::make_unique<bench::EmulatedNetwork>(nproc, o.link);  // throws user errors (root, ip, tc)
    opts.extra_env["BAGUA_BENCH_NETNS"] = network->prefix();
    opts.extra_env["GLOO_SOCKET_IFNAME"] = bench::EmulatedNetwork::kInterface;
    opts.master_addr = bench::EmulatedNetwork::address(0);  // rank 0 serves the store, inside its namespace
    opts.master_port = DistributedSpec::kDefaultMasterPort;
  }
  // One machine, no port asked for and no emulated links: the workers
  // meet through a file (as bagua run's), nothing listens beyond loopback.
  std::unique_ptr<RendezvousServer> store;
  if (nnodes == 1 && !o.master_port && o.link.empty()) {
    try {
      store = RendezvousServer::private_file();
    } catch (const ConfigError& e) {
      say(e.what());
      outcome.exit_code = kExitInvalidInput;
      return outcome;
    }
    opts.store_file = store->file();
  }

  say(std::to_string(world) + " workers (" + plural(nnodes, "node") + " x " + std::to_string(nproc) + "), " +
      (recipe ? "recipe " + o.recipe_arg : "synthetic model of about " + o.params_arg + " parameters") +
      (o.link.empty() ? "" : ", each worker on its own machine linked at " + o.link) +
      (spec.straggler_rank >= 0 ? ", rank " + std::to_string(spec.straggler_rank) + " slowed " +
                                      o.straggler.substr(o.straggler.find(':') + 1) + "x"
                                : "") +
      "\n  " + plural(static_cast<int64_t>(spec.algorithms.size()), "algorithm") +
      (layout.baseline_added ? std::string(" (") + bench::kBaseline +
                                   " added: the baseline the others are compared with)"
                             : "") +
      " and a local reference, " +
      std::to_string(spec.warmup) + " warm-up steps, then " + std::to_string(spec.rounds) +
      " alternating rounds of " + std::to_string(spec.steps) + " steps each");
  const LaunchResult result = LocalSupervisor(opts).run();
  if (!result.ok) {
    if (result.interrupted) {
      say("interrupted");
      outcome.exit_code = kExitInterrupted;
      return outcome;
    }
    say(result.summary());
    const bool user = result.first_failure && !result.first_failure->signaled &&
                      result.first_failure->status == kExitInvalidInput;
    outcome.exit_code = user ? kExitInvalidInput : kExitWorkerFailed;
    return outcome;
  }
  if (!fs::exists(result_path)) {
    say("done; the figures are printed by node 0");
    return outcome;
  }
  std::ifstream in(result_path);
  json raw = json::parse(in);
  raw["link"] = o.link.empty() ? json(nullptr) : json(o.link);
  raw["straggler"] = spec.straggler_rank < 0 ? json(nullptr)
                                             : json({{"rank", spec.straggler_rank}, {"factor", spec.straggler_factor}});
  raw["recipe"] = recipe ? json(o.recipe_arg) : json(nullptr);
  raw["recipe_name"] = recipe ? json(recipe->name) : json(nullptr);
  raw["baseline_added"] = layout.baseline_added;
  outcome.report = bench::summarize_bench(std::move(raw));
  return outcome;
}

void run_bench_worker_files(const std::string& spec_file, const std::string& result_file) {
  // --link: this worker is a machine of its own, in its own namespace.
  if (const char* prefix = std::getenv("BAGUA_BENCH_NETNS"); prefix && *prefix) {
    const char* local = std::getenv("LOCAL_RANK");
    bench::EmulatedNetwork::enter_namespace(prefix, local ? std::atoi(local) : 0);
    setenv("LOCAL_RANK", "0", 1);
    setenv("LOCAL_WORLD_SIZE", "1", 1);
    setenv("GROUP_RANK", std::getenv("RANK"), 1);
  }
  std::ifstream in(spec_file);
  const BenchSpec spec = BenchSpec::from_json(json::parse(in));
  const json result = run_bench_worker(spec);
  if (!result.is_null()) {
    const std::string tmp = result_file + ".tmp";
    std::ofstream(tmp) << result.dump(1) << "\n";
    fs::rename(tmp, result_file);
  }
}

}  // namespace bagua
