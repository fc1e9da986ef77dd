// bagua diff A B: the keys that differ between two resolved recipes (each a
// recipe file, a catalog name, or a run directory). No LibTorch.
#include "command.h"

#include <bagua/provenance.h>
#include <bagua/recipe_catalog.h>
#include <bagua/recipe_key_path.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>

namespace bagua::cli {
namespace {
namespace fs = std::filesystem;

struct Side {
  std::string argument;
  std::string file;  // what was loaded
  Recipe recipe;
  std::map<std::string, std::string> origins;  // key path -> where it was set
};

// A run directory's provenance.json knows where each key was set in the
// recipe files that made the run; otherwise its recipe.resolved.yaml does.
Side load_side(const std::string& argument, const std::vector<std::string>& overrides) {
  Side side;
  side.argument = argument;
  side.file = locate_recipe_argument(argument);
  RecipeLoadOptions options;
  options.check_files = false;  // comparing needs no data on this machine
  side.recipe = load_recipe(side.file, overrides, options);
  for (const auto& [k, where] : side.recipe.origin.values) side.origins[k] = where.to_string();
  if (is_run_directory(argument)) {
    std::ifstream in(fs::path(argument) / "provenance.json");
    nlohmann::json p = in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
    if (p.is_object() && p.contains("recipe") && p["recipe"].contains("origins") && p["recipe"]["origins"].is_object())
      for (auto it = p["recipe"]["origins"].begin(); it != p["recipe"]["origins"].end(); ++it)
        if (!side.origins.count(it.key()) || side.origins[it.key()].rfind("--set ", 0) != 0)
          side.origins[it.key()] = it->get<std::string>();
  }
  return side;
}

// Where `path` was set: its position, or "default" when the schema filled it.
std::string origin_of(const Side& side, const std::string& path, bool present) {
  if (!present) return "absent";
  if (auto it = side.origins.find(path); it != side.origins.end()) return it->second;
  return "default";
}

// The --ignore paths, parsed: a malformed one is a user error, and
// "optimizers.0" leaves out what "optimizers[0]" does.
std::vector<KeyPath> ignored_paths(const std::vector<std::string>& texts) {
  std::vector<KeyPath> out;
  for (const auto& text : texts) {
    std::string error;
    std::optional<KeyPath> path = KeyPath::parse(text, error);
    if (!path)
      throw Error("--ignore " + text + ": " + error + " (expected a key path such as output or optimizers[0].lr)",
                  true);
    out.push_back(*std::move(path));
  }
  return out;
}

bool ignored(const std::string& path, const std::vector<KeyPath>& ignore) {
  for (const auto& key : ignore)
    if (KeyPath::is_same_or_under(path, key.to_string())) return true;
  return false;
}

struct DiffFlags {
  std::string a, b;
  std::vector<std::string> set_a, set_b, ignore;
  bool json = false;
};

int run_diff(const DiffFlags& f) {
  const std::vector<KeyPath> ignore = ignored_paths(f.ignore);
  Side a, b;
  try {
    a = load_side(f.a, f.set_a);
  } catch (const RecipeError& e) {
    return report_invalid_recipe(e, f.a);
  }
  try {
    b = load_side(f.b, f.set_b);
  } catch (const RecipeError& e) {
    return report_invalid_recipe(e, f.b);
  }
  std::vector<KeyDifference> diffs;
  for (auto& d : diff_resolved(a.recipe.resolved, b.recipe.resolved))
    if (!ignored(d.path, ignore)) diffs.push_back(std::move(d));
  const std::string sha_a = canonical_recipe_sha256(a.recipe.resolved);
  const std::string sha_b = canonical_recipe_sha256(b.recipe.resolved);
  if (f.json) {
    nlohmann::json out;
    out["equal"] = diffs.empty();
    out["a"] = {{"argument", f.a}, {"file", a.file}, {"sha256", sha_a}};
    out["b"] = {{"argument", f.b}, {"file", b.file}, {"sha256", sha_b}};
    out["differences"] = nlohmann::json::array();
    for (const auto& d : diffs) {
      nlohmann::json item = {{"path", d.path},
                             {"a_from", origin_of(a, d.path, d.a.has_value())},
                             {"b_from", origin_of(b, d.path, d.b.has_value())}};
      if (d.a) item["a"] = *d.a;
      if (d.b) item["b"] = *d.b;
      out["differences"].push_back(item);
    }
    std::cout << out.dump(2) << "\n";
    return diffs.empty() ? kExitOk : 1;
  }
  for (const auto& d : diffs) {
    const char mark = !d.a ? '+' : !d.b ? '-' : '~';
    std::cout << mark << " " << d.path << ": " << (d.a ? short_json(*d.a) : "(absent)") << " -> "
              << (d.b ? short_json(*d.b) : "(absent)") << "\n"
              << "    A: " << origin_of(a, d.path, d.a.has_value()) << "\n"
              << "    B: " << origin_of(b, d.path, d.b.has_value()) << "\n";
  }
  if (diffs.empty()) {
    std::cout << "same resolved recipe" << (f.ignore.empty() ? " (sha256 " + sha_a + ")" : " (ignoring " +
                                            std::to_string(f.ignore.size()) + " key(s))") << "\n";
  } else {
    std::cout << diffs.size() << (diffs.size() == 1 ? " key differs" : " keys differ") << " between A (" << f.a
              << ") and B (" << f.b << ")\n";
  }
  return diffs.empty() ? kExitOk : 1;
}

const CommandRegistration kDiff{
    "diff", "Compare two recipes or run directories key by key, after resolution",
    [](CLI::App& sub) -> CommandRunner {
      auto f = std::make_shared<DiffFlags>();
      sub.add_option("a", f->a, "Recipe file, catalog name, or run directory")->required();
      sub.add_option("b", f->b, "Recipe file, catalog name, or run directory")->required();
      sub.add_option("--set-a", f->set_a, "Override a key of A first: key.path=value; repeatable")
          ->type_name("KEY=VALUE")->allow_extra_args(false);
      sub.add_option("--set-b", f->set_b, "Override a key of B first: key.path=value; repeatable")
          ->type_name("KEY=VALUE")->allow_extra_args(false);
      sub.add_option("--ignore", f->ignore, "Leave out a key and everything under it (e.g. name, output); repeatable")
          ->allow_extra_args(false);
      sub.add_flag("--json", f->json, "As JSON: {equal, a, b, differences: [{path, a, b, a_from, b_from}]}");
      sub.footer(
          "Both sides are resolved first (extends merged, --set applied, ${VAR}s expanded, defaults\n"
          "filled), so two recipes written differently but meaning the same are equal. Each\n"
          "difference shows both values and where each side set it (FILE:LINE:COL, the --set, or\n"
          "default). A run directory is compared as the run recorded it (recipe.resolved.yaml, with\n"
          "the positions from its provenance.json).\n\n"
          "Exit status: 0 equal, 1 different, 2 a side is invalid or missing, or an --ignore path is\n"
          "malformed.\n\n"
          "Examples:\n"
          "  bagua diff recipes/fashion-mnist-mlp.yaml my-experiment.yaml\n"
          "  bagua diff runs/baseline runs/candidate --ignore name --ignore output\n"
          "  bagua diff fashion-mnist-mlp fashion-mnist-mlp --set-b optimizers[0].lr=0.1 --json\n");
      return [f]() -> int { return run_diff(*f); };
    }};

}  // namespace
}  // namespace bagua::cli
