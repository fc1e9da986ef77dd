// bagua validate RECIPE... [--set k=v]... [--print]
//
// Several recipes are checked in one call, each reported as if alone; a file
// that another recipe of the call extends and that lacks required keys is a
// fragment, checked only through the recipes that extend it.
#include "command.h"

#include <bagua/algorithms/catalog.h>
#include <bagua/recipe.h>
#include <bagua/recipe_catalog.h>

#include <filesystem>
#include <iostream>
#include <map>

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

// The same file however it is named (./a.yaml, a.yaml, a link).
std::string file_identity(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::weakly_canonical(path, ec);
  return ec ? std::filesystem::path(path).lexically_normal().string() : p.string();
}

// What validate prints for a recipe that loaded: its notes, and its
// summary line (on stderr after the resolved YAML with --print).
void say_valid(const Recipe& r, bool print) {
  for (const auto& note : r.notes) std::cerr << note.to_string() << " (note)\n";
  if (print) {
    std::cout << resolved_recipe_yaml(r);
    std::cerr << summary(r) << "\n";
  } else {
    std::cout << summary(r) << "\n";
  }
}

// Validates one recipe and prints what validate prints for it; returns the
// exit status for it alone.
int validate_one(const std::string& argument, const std::vector<std::string>& overrides, bool print) {
  try {
    say_valid(load_recipe(resolve_recipe_argument(argument), overrides), print);
    return kExitOk;
  } catch (const RecipeError& e) {
    return report_invalid_recipe(e, argument);
  }
}

// The keys a recipe lacks when it lacks nothing else (a fragment that
// other recipes complete); empty when anything else is wrong with it.
std::vector<std::string> only_lacks(const RecipeError& e) {
  std::vector<std::string> lacks;
  for (const auto& d : e.diagnostics()) {
    if (d.message.rfind("missing required key", 0) != 0) return {};
    lacks.push_back(d.key_path);
  }
  return lacks;
}

int validate_many(const std::vector<std::string>& arguments, const std::vector<std::string>& overrides) {
  // Which arguments are extended by another: those are bases.
  std::vector<std::string> files(arguments.size());
  std::map<std::string, std::vector<std::string>> extended_by;  // base identity -> arguments extending it
  for (size_t i = 0; i < arguments.size(); ++i) {
    try {
      files[i] = locate_recipe_argument(arguments[i]);
    } catch (const Error&) {
      continue;  // the load below says why
    }
    for (const std::string& base : recipe_bases(files[i])) extended_by[file_identity(base)].push_back(arguments[i]);
  }
  int valid = 0, invalid = 0, bases = 0;
  for (size_t i = 0; i < arguments.size(); ++i) {
    // Each argument is loaded once: what it is follows from the outcome.
    int status;
    try {
      say_valid(load_recipe(resolve_recipe_argument(arguments[i]), overrides), false);
      status = kExitOk;
    } catch (const RecipeError& e) {
      // A base is a recipe too when it is whole (the quickstart that the
      // CNN recipe extends); one that lacks only required keys is a
      // fragment, checked through the recipes that extend it.
      const auto children = files[i].empty() ? extended_by.end() : extended_by.find(file_identity(files[i]));
      const std::vector<std::string> lacks = children != extended_by.end() ? only_lacks(e) : std::vector<std::string>{};
      if (!lacks.empty()) {
        ++bases;
        const auto& by = children->second;
        std::cout << arguments[i] << ": a base (alone it lacks ";
        for (size_t k = 0; k < lacks.size(); ++k) std::cout << (k ? ", " : "") << lacks[k];
        std::cout << "), checked through " << by.front();
        if (by.size() > 1) std::cout << " and " << by.size() - 1 << " more";
        std::cout << "\n";
        continue;
      }
      status = report_invalid_recipe(e, arguments[i]);
    } catch (const Error& e) {  // not found, not a recipe
      if (!e.is_user_error()) throw;
      std::cerr << arguments[i] << ": " << e.what() << "\n";
      status = kExitInvalidInput;
    }
    (status == kExitOk ? valid : invalid) += 1;
  }
  std::cerr << arguments.size() << " files: " << valid << " valid, " << invalid << " invalid";
  if (bases) std::cerr << ", " << bases << " base" << (bases == 1 ? "" : "s") << " checked through the recipes extending them";
  std::cerr << "\n";
  return invalid ? kExitInvalidInput : kExitOk;
}

const CommandRegistration kValidate{
    "validate", "Check recipes and report every problem at once",
    [](CLI::App& sub) -> CommandRunner {
      auto recipes = std::make_shared<std::vector<std::string>>();
      auto overrides = std::make_shared<std::vector<std::string>>();
      auto print = std::make_shared<bool>(false);
      sub.add_option("recipe", *recipes,
                     "Recipe files (YAML), catalog names (bagua recipes list) or run directories; with several, "
                     "a base another extends that lacks required keys is checked through it")
          ->required();
      sub.add_option("--set", *overrides,
                     "Override a key before validation: key.path=value (value parsed as YAML); repeatable, "
                     "applied to every recipe")
          ->type_name("KEY=VALUE")->allow_extra_args(false);
      sub.add_flag("--print", *print,
                   "Print the resolved recipe (extends merged, overrides applied, defaults filled) as YAML "
                   "(one recipe only)");
      sub.footer(
          "Exit status: 0 every recipe valid, 2 any invalid (every error is listed as\n"
          "FILE:LINE:COL: key.path: message), 1 internal failure.\n\n"
          "Examples:\n"
          "  bagua validate recipes/fashion-mnist-mlp.yaml\n"
          "  bagua validate recipes/fashion-mnist-mlp.yaml --set data.batch_size=128 --set train.epochs=5\n"
          "  bagua validate recipe.yaml --set 'optimizers[0].lr=0.1' --print > resolved.yaml\n"
          "  bagua validate recipes/*.yaml team/*.yaml   # a whole repository; partial bases are checked through their recipes\n"
          "  NPROC=4 bagua validate recipe.yaml   # with distributed.nproc_per_node: ${NPROC:-2}\n");
      return [recipes, overrides, print]() -> int {
        if (recipes->size() == 1) return validate_one(recipes->front(), *overrides, *print);
        if (*print) throw ConfigError("--print takes one recipe (" + std::to_string(recipes->size()) + " given)");
        return validate_many(*recipes, *overrides);
      };
    }};

}  // namespace
}  // namespace bagua::cli
