// bagua bench: how fast each algorithm trains this model on this network,
// measured side by side in one invocation (docs/bench.md).
//
// The launcher checks the flags (and the recipe, when one is given), writes
// the workers' BenchSpec to a temporary directory, optionally builds the
// emulated network (--link), starts the workers as `bagua run` does, and
// turns rank 0's figures into a table, a recommendation, JSON and an SVG.
// A worker is this same command with --worker-spec (set by the launcher).
#include "bench/bench_report.h"
#include "command.h"
#include "runtime_commands.h"
#include "bench/emulated_network.h"

#include <bagua/algorithms/registry.h>
#include <bagua/bench.h>
#include <bagua/errors.h>
#include <bagua/launch.h>
#include <bagua/recipe.h>
#include <bagua/preflight.h>
#include <bagua/preflight.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

namespace bagua::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct BenchFlags {
  std::string recipe;
  std::vector<std::string> algorithms, overrides;
  std::optional<int> nproc_per_node, nnodes, node_rank, master_port;
  std::optional<std::string> master_addr;
  int64_t steps = 10, warmup = 5, rounds = 3, batch_size = 32;
  std::string params = "10M";
  std::string json_path, plot_path, link, straggler;
  std::string worker_spec, worker_result;  // worker mode (set by the launcher)
};

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
};

int fail(const std::string& message) {
  std::cerr << "bagua bench: " << message << "\n";
  return kExitInvalidInput;
}

int run_worker_mode(const BenchFlags& f) {
  // --link: this worker is a machine of its own, in its own namespace.
  if (const char* prefix = std::getenv("BAGUA_BENCH_NETNS"); prefix && *prefix) {
    const char* local = std::getenv("LOCAL_RANK");
    bench::EmulatedNetwork::enter_namespace(prefix, local ? std::atoi(local) : 0);
    setenv("LOCAL_RANK", "0", 1);
    setenv("LOCAL_WORLD_SIZE", "1", 1);
    setenv("GROUP_RANK", std::getenv("RANK"), 1);
  }
  std::ifstream in(f.worker_spec);
  BenchSpec spec = BenchSpec::from_json(json::parse(in));
  json result = run_bench_worker(spec);
  if (!result.is_null()) {
    const std::string tmp = f.worker_result + ".tmp";
    std::ofstream(tmp) << result.dump(1) << "\n";
    fs::rename(tmp, f.worker_result);
  }
  return kExitOk;
}

int launch(const BenchFlags& f) {
  // Flags first: everything wrong is reported before anything starts.
  std::vector<std::string> algorithms = f.algorithms;
  if (algorithms.empty()) {
    for (const auto& d : algorithm_catalog()) {
      if (bagua::algorithm_implemented(d.name)) algorithms.push_back(d.name);
    }
  }
  for (const auto& a : algorithms) {
    const AlgorithmDescriptor* d = find_algorithm(a);
    if (d == nullptr || !algorithm_implemented(a)) {
      std::string known;
      for (const auto& r : algorithm_catalog()) known += (known.empty() ? "" : ", ") + r.name;
      return fail("--algorithm " + a + ": no such algorithm; known: " + known);
    }
  }
  BenchSpec spec;
  spec.algorithms = algorithms;
  spec.steps = f.steps;
  spec.warmup = f.warmup;
  spec.rounds = f.rounds;
  spec.batch_size = f.batch_size;
  spec.overrides = f.overrides;
  try {
    spec.params = parse_count(f.params);
  } catch (const InvalidArgument& e) {
    return fail(std::string("--params: ") + e.what());
  }

  std::optional<Recipe> recipe;
  if (!f.recipe.empty()) {
    try {
      recipe = load_recipe(f.recipe, f.overrides);
    } catch (const RecipeError& e) {
      return report_invalid_recipe(e, f.recipe);
    }
    spec.recipe = fs::absolute(f.recipe).string();
    check_supported(*recipe);
    check_data(*recipe);
  } else if (!f.overrides.empty()) {
    return fail("--set needs a recipe to change");
  }
  const int nproc = f.nproc_per_node.value_or(recipe ? recipe->distributed.nproc_per_node : 2);
  const int nnodes = f.nnodes.value_or(recipe ? recipe->distributed.nnodes : 1);
  const int node_rank = f.node_rank.value_or(0);
  if (nproc < 1 || nnodes < 1 || node_rank < 0 || node_rank >= nnodes) {
    return fail("--nproc-per-node and --nnodes must be at least 1, and --node-rank below --nnodes");
  }
  const int world = nproc * nnodes;
  if (!f.straggler.empty()) {
    const auto colon = f.straggler.find(':');
    char* end1 = nullptr;
    char* end2 = nullptr;
    const std::string r = f.straggler.substr(0, colon), x = colon == std::string::npos ? "" : f.straggler.substr(colon + 1);
    const long rank = std::strtol(r.c_str(), &end1, 10);
    const double factor = std::strtod(x.c_str(), &end2);
    if (colon == std::string::npos || r.empty() || x.empty() || *end1 != '\0' || *end2 != '\0' || rank < 0 ||
        rank >= world || !(factor >= 1) || factor > 1000) {
      return fail("--straggler " + f.straggler + ": expected RANK:FACTOR with 0 <= RANK < " + std::to_string(world) +
                  " and FACTOR from 1 to 1000, e.g. 1:2 (rank 1's compute twice as slow)");
    }
    spec.straggler_rank = static_cast<int>(rank);
    spec.straggler_factor = factor;
  }
  if (!f.link.empty() && nnodes > 1) {
    return fail("--link emulates the network between the workers of one machine; with --nnodes the network is real");
  }
  if (!f.link.empty() && !bench::EmulatedNetwork::valid_rate(f.link)) {
    return fail("--link " + f.link + ": not a rate; give a number and a unit: 1gbit, 500mbit, 100mbps, ...");
  }
  if (!f.plot_path.empty() && fs::path(f.plot_path).extension() != ".svg") {
    return fail("--plot " + f.plot_path + ": the chart is SVG; name a FILE.svg");
  }
  spec.progress_tty = isatty(STDERR_FILENO) == 1;

  TempDir work;
  const fs::path spec_path = work.path / "spec.json", result_path = work.path / "result.json";
  std::ofstream(spec_path) << spec.to_json().dump(1) << "\n";

  LaunchOptions opts;
  opts.command = {self_exe(), "bench", "--worker-spec", spec_path.string(), "--worker-result", result_path.string()};
  opts.nproc_per_node = nproc;
  opts.nnodes = nnodes;
  opts.node_rank = node_rank;
  opts.master_addr = f.master_addr.value_or(recipe ? recipe->distributed.master_addr : "127.0.0.1");
  opts.master_port = f.master_port.value_or(nnodes == 1 ? 0 : DistributedSpec::kDefaultMasterPort);
  opts.echo_rank = nnodes > 1 && node_rank != 0 ? -1 : 0;
  opts.prefix_output = nnodes > 1 && node_rank != 0;
  opts.threads_per_worker = recipe ? recipe->train.threads.value_or(0) : 0;
  opts.cause_statuses = {kExitInvalidInput};  // as bagua run: the rank that found bad input
  opts.log_dir = (work.path / "logs").string();
  std::unique_ptr<bench::EmulatedNetwork> network;
  if (!f.link.empty()) {
    network = std::make_unique<bench::EmulatedNetwork>(nproc, f.link);  // throws user errors (root, ip, tc)
    opts.extra_env["BAGUA_BENCH_NETNS"] = network->prefix();
    opts.extra_env["GLOO_SOCKET_IFNAME"] = bench::EmulatedNetwork::kInterface;
    opts.master_addr = bench::EmulatedNetwork::address(0);  // rank 0 serves the store, inside its namespace
    opts.master_port = DistributedSpec::kDefaultMasterPort;
  }

  std::cerr << "bagua bench: " << world << " workers (" << nnodes << " node" << (nnodes == 1 ? "" : "s") << " x "
            << nproc << "), " << (recipe ? "recipe " + f.recipe : "synthetic model of about " + f.params + " parameters")
            << (f.link.empty() ? "" : ", each worker on its own machine linked at " + f.link)
            << (spec.straggler_rank >= 0 ? ", rank " + std::to_string(spec.straggler_rank) + " slowed " +
                                               f.straggler.substr(f.straggler.find(':') + 1) + "x"
                                         : "")
            << "\n  " << algorithms.size() << " algorithm" << (algorithms.size() == 1 ? "" : "s") << " and a local "
            << "reference, " << spec.warmup << " warm-up steps, then " << spec.rounds << " alternating rounds of "
            << spec.steps << " steps each\n";
  LaunchResult result = LocalSupervisor(opts).run();
  if (!result.ok) {
    if (result.interrupted) {
      std::cerr << "bagua bench: interrupted\n";
      return kExitInterrupted;
    }
    std::cerr << "bagua bench: " << result.summary() << "\n";
    const bool user = result.first_failure && !result.first_failure->signaled &&
                      result.first_failure->status == kExitInvalidInput;
    return user ? kExitInvalidInput : kExitWorkerFailed;
  }
  if (!fs::exists(result_path)) {
    std::cerr << "bagua bench: done; the figures are printed by node 0\n";
    return kExitOk;
  }
  std::ifstream in(result_path);
  json raw = json::parse(in);
  raw["link"] = f.link.empty() ? json(nullptr) : json(f.link);
  raw["straggler"] = spec.straggler_rank < 0 ? json(nullptr)
                                             : json({{"rank", spec.straggler_rank}, {"factor", spec.straggler_factor}});
  raw["recipe"] = f.recipe.empty() ? json(nullptr) : json(f.recipe);
  json report = bench::summarize_bench(std::move(raw));
  std::cout << bench::bench_table(report) << "\nrecommendation: " << report["recommendation"].get<std::string>() << "\n";
  if (!f.json_path.empty()) {
    std::ofstream out(f.json_path);
    out << report.dump(2) << "\n";
    if (!out) return fail("cannot write " + f.json_path);
    std::cerr << "bagua bench: figures in " << f.json_path << "\n";
  }
  if (!f.plot_path.empty()) {
    std::ofstream out(f.plot_path);
    out << bench::bench_svg(report);
    if (!out) return fail("cannot write " + f.plot_path);
    std::cerr << "bagua bench: chart in " << f.plot_path << "\n";
  }
  return kExitOk;
}

const CommandRegistration kBench{
    "bench", runtime_description("bench"),
    [](CLI::App& sub) -> CommandRunner {
      auto f = std::make_shared<BenchFlags>();
      sub.add_option("recipe", f->recipe, "Recipe whose model, data, optimizers and batch size to use; "
                                          "none: a synthetic model on random data");
      sub.add_option("--algorithm", f->algorithms, "Algorithm to measure; repeatable (default: every one)")
          ->type_name("NAME")->allow_extra_args(false);
      sub.add_option("--nproc-per-node", f->nproc_per_node, "Workers on this node (default: the recipe's, else 2)");
      sub.add_option("--nnodes", f->nnodes, "Nodes in the job");
      sub.add_option("--node-rank", f->node_rank, "This node's index");
      sub.add_option("--master-addr", f->master_addr, "Rendezvous host, node 0");
      sub.add_option("--master-port", f->master_port, "Rendezvous port (one node: a free one)");
      sub.add_option("--steps", f->steps, "Measured steps per algorithm and round")->capture_default_str()
          ->check(CLI::Range(1, 1000000));
      sub.add_option("--warmup", f->warmup, "Unmeasured steps per algorithm first")->capture_default_str()
          ->check(CLI::Range(0, 1000000));
      sub.add_option("--rounds", f->rounds, "Alternating rounds")->capture_default_str()->check(CLI::Range(1, 10000));
      sub.add_option("--params", f->params, "Synthetic model: about this many parameters (25M, 300k, ...)")
          ->capture_default_str();
      sub.add_option("--batch-size", f->batch_size, "Synthetic model: samples per worker and step")
          ->capture_default_str()->check(CLI::Range(1, 1000000));
      sub.add_option("--set", f->overrides, "Override a recipe key: key.path=value; repeatable")
          ->type_name("KEY=VALUE")->allow_extra_args(false);
      sub.add_option("--json", f->json_path, "Write every figure to FILE (JSON)")->type_name("FILE");
      sub.add_option("--plot", f->plot_path, "Write a chart of step time, compute and communication (SVG)")
          ->type_name("FILE.svg");
      sub.add_option("--link", f->link,
                     "Each worker on its own emulated machine, linked at RATE (1gbit, 500mbit; needs root, ip, tc)")
          ->type_name("RATE");
      sub.add_option("--straggler", f->straggler, "Make RANK's compute FACTOR times slower, e.g. 1:2")
          ->type_name("RANK:FACTOR");
      sub.add_option("--worker-spec", f->worker_spec)->group("");
      sub.add_option("--worker-result", f->worker_result)->group("");
      sub.footer(
          "Starts the workers as `bagua run` does and measures, side by side, every algorithm asked for\n"
          "(default: all) and a local reference (the same step without communication). Each first takes\n"
          "--warmup steps; then --rounds rounds run each for --steps steps in turn. Per algorithm: the\n"
          "median step time and its spread, samples/s of all workers, the share of the step spent on\n"
          "communication, bytes per worker and step (counted by the communication layer, and sent on the\n"
          "wire), and the loss after the measured steps. A table and a recommendation at the end.\n\n"
          "Exit status: 0 done, 2 bad flags or recipe (or --link without root, ip or tc), 3 a worker\n"
          "failed, 130 interrupted, 1 internal failure.\n\n"
          "Examples:\n"
          "  bagua bench --algorithm bytegrad --algorithm gradient_allreduce\n"
          "  bagua bench --params 25M --link 1gbit --json bench.json --plot bench.svg\n"
          "  bagua bench recipes/fashion-mnist-mlp.yaml --nproc-per-node 4 --straggler 1:2\n");
      return [f]() -> int {
        if (!f->worker_spec.empty()) return run_worker_mode(*f);
        return launch(*f);
      };
    }};

}  // namespace
}  // namespace bagua::cli
