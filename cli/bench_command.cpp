// bagua bench: how fast each algorithm trains this model on this network,
// measured side by side in one invocation (docs/bench.md).
//
// Flags and rendering: the agent (checks, the emulated network of --link,
// the workers, the summary) is run_bench() (bagua/bench.h); this prints its
// table and recommendation and writes the JSON and the SVG. A worker is
// this same command with --worker-spec (set by the agent).
#include "command.h"
#include "runtime_commands.h"

#include <bagua/bench.h>
#include <bagua/errors.h>
#include <bagua/recipe.h>
#include <bagua/recipe_catalog.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

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

int fail(const std::string& message) {
  std::cerr << "bagua bench: " << message << "\n";
  return kExitInvalidInput;
}

int launch(const BenchFlags& f) {
  // Flags first: everything wrong is reported before anything starts.
  BenchOptions o;
  o.spec.algorithms = f.algorithms;
  o.spec.steps = f.steps;
  o.spec.warmup = f.warmup;
  o.spec.rounds = f.rounds;
  o.spec.batch_size = f.batch_size;
  o.spec.overrides = f.overrides;
  try {
    o.spec.params = parse_count(f.params);
  } catch (const InvalidArgument& e) {
    return fail(std::string("--params: ") + e.what());
  }
  if (!f.recipe.empty()) {
    // A file, a catalog name or a run directory, as bagua run takes it; the
    // workers load the same file with the same overrides.
    const RecipeArgument argument = resolve_recipe_argument(f.recipe);
    try {
      o.recipe = load_recipe(argument, f.overrides);
    } catch (const RecipeError& e) {
      return report_invalid_recipe(e, f.recipe);
    }
    o.spec.recipe = fs::absolute(argument.file).string();
    o.spec.overrides.insert(o.spec.overrides.begin(), argument.overrides.begin(), argument.overrides.end());
  }
  if (!f.plot_path.empty() && fs::path(f.plot_path).extension() != ".svg") {
    return fail("--plot " + f.plot_path + ": the chart is SVG; name a FILE.svg");
  }
  o.recipe_arg = f.recipe;
  o.params_arg = f.params;
  o.nproc_per_node = f.nproc_per_node;
  o.nnodes = f.nnodes;
  o.node_rank = f.node_rank;
  o.master_port = f.master_port;
  o.master_addr = f.master_addr;
  o.straggler = f.straggler;
  o.link = f.link;
  o.worker_command = {self_exe(), "bench"};
  o.progress_tty = isatty(STDERR_FILENO) == 1;
  const BenchOutcome outcome = run_bench(std::move(o));
  if (outcome.report.is_null()) return outcome.exit_code;
  const json& report = outcome.report;
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
      sub.add_option("recipe", f->recipe, "Recipe whose step to measure: its model, data, optimizers, batch size, "
                                          "precision, grad_accum_steps and clip_grad_norm (a file, a catalog name, or "
                                          "a run directory); none: a synthetic model on random data");
      sub.add_option("--algorithm", f->algorithms,
                     "Algorithm to measure; repeatable (default: every one; the baseline gradient_allreduce always)")
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
          "wire), and the loss after the measured steps. A table and a verdict at the end: a recommendation\n"
          "when the fastest's p10-p90 step time is clear of the others', else which are within noise.\n"
          "gradient_allreduce, the baseline, is measured whether asked for or not.\n\n"
          "Exit status: 0 done, 2 bad flags or recipe (or --link without root, ip or tc), 3 a worker\n"
          "failed, 130 interrupted, 1 internal failure.\n\n"
          "Examples:\n"
          "  bagua bench --algorithm bytegrad --algorithm gradient_allreduce\n"
          "  bagua bench --params 25M --link 1gbit --json bench.json --plot bench.svg\n"
          "  bagua bench recipes/fashion-mnist-mlp.yaml --nproc-per-node 4 --straggler 1:2\n"
          "  bagua bench fashion-mnist-mlp --algorithm bytegrad   # a catalog name (or a run directory)\n");
      return [f]() -> int {
        if (!f->worker_spec.empty()) {
          run_bench_worker_files(f->worker_spec, f->worker_result);
          return kExitOk;
        }
        return launch(*f);
      };
    }};

}  // namespace
}  // namespace bagua::cli
