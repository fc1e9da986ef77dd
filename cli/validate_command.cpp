// bagua validate RECIPE [--set k=v]... [--print]
#include "command.h"

#include <bagua/algorithms/catalog.h>
#include <bagua/recipe.h>
#include <bagua/recipe_catalog.h>

#include <iostream>

namespace bagua::cli {
namespace {

std::string summary(const Recipe& r) {
  std::string optimizers;
  for (const auto& o : r.optimizers) optimizers += std::string(optimizers.empty() ? "" : "+") + to_string(o.type);
  const auto& d = r.distributed;
  const int workers = d.nproc_per_node * d.nnodes;
  // Both limits hold, whichever comes first (validate reads no data, so it
  // cannot say which): "up to 30 steps within 1 epoch".
  const std::string epochs = std::to_string(r.train.epochs) + " epoch" + (r.train.epochs == 1 ? "" : "s");
  std::string length = r.train.max_steps ? "up to " + std::to_string(*r.train.max_steps) + " steps within " + epochs
                                         : epochs;
  // An elastic job: "4 to 6 workers on 2 to 3 nodes (elastic)".
  const std::string world =
      d.elastic() ? std::to_string(workers) + " to " + std::to_string(d.nproc_per_node * d.nnodes_max) +
                        " workers on " + std::to_string(d.nnodes) + " to " + std::to_string(d.nnodes_max) +
                        " nodes (elastic)"
                  : std::to_string(workers) + " worker" + (workers == 1 ? "" : "s") + " on " +
                        std::to_string(d.nnodes) + " node" + (d.nnodes == 1 ? "" : "s");
  // Which hierarchical auto chose; an elastic job decides it each round.
  std::string algorithm = r.algorithm.name;
  const std::string hierarchy =
      hierarchical_choice(r.algorithm.name, r.algorithm.kwargs, d.elastic() && d.nnodes_max > 1 ? 0 : d.nnodes);
  if (hierarchy.rfind("hierarchical: auto", 0) == 0) algorithm += ", " + hierarchy;
  return r.source + ": valid recipe " + r.name + " (" + algorithm + ", " + world + ", " + optimizers + ", batch " +
         std::to_string(r.data.batch_size) + " per worker, " + length + ", output " + r.output.dir + ")";
}

const CommandRegistration kValidate{
    "validate", "Check a recipe and report every problem at once",
    [](CLI::App& sub) -> CommandRunner {
      auto recipe = std::make_shared<std::string>();
      auto overrides = std::make_shared<std::vector<std::string>>();
      auto print = std::make_shared<bool>(false);
      sub.add_option("recipe", *recipe, "Recipe file (YAML), catalog name (bagua recipes list), or run directory")->required();
      sub.add_option("--set", *overrides,
                     "Override a key before validation: key.path=value (value parsed as YAML); repeatable")
          ->type_name("KEY=VALUE")->allow_extra_args(false);
      sub.add_flag("--print", *print,
                   "Print the resolved recipe (extends merged, overrides applied, defaults filled) as YAML");
      sub.footer(
          "Exit status: 0 valid, 2 invalid (every error is listed as FILE:LINE:COL: key.path: message),\n"
          "1 internal failure.\n\n"
          "Examples:\n"
          "  bagua validate recipes/fashion-mnist-mlp.yaml\n"
          "  bagua validate recipes/fashion-mnist-mlp.yaml --set data.batch_size=128 --set train.epochs=5\n"
          "  bagua validate recipe.yaml --set 'optimizers[0].lr=0.1' --print > resolved.yaml\n"
          "  NPROC=4 bagua validate recipe.yaml   # with distributed.nproc_per_node: ${NPROC:-2}\n");
      return [recipe, overrides, print]() -> int {
        try {
          Recipe r = load_recipe(resolve_recipe_argument(*recipe), *overrides);
          for (const auto& note : r.notes) std::cerr << note.to_string() << " (note)\n";
          if (*print) {
            std::cout << resolved_recipe_yaml(r);
            std::cerr << summary(r) << "\n";
          } else {
            std::cout << summary(r) << "\n";
          }
          return kExitOk;
        } catch (const RecipeError& e) {
          return report_invalid_recipe(e, *recipe);
        }
      };
    }};

}  // namespace
}  // namespace bagua::cli
