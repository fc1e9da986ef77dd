// bagua recipes list | show NAME | copy NAME DEST | pin RECIPE
// The catalog of shared recipes (bagua/recipe_catalog.h). No LibTorch.
#include "command.h"

#include <bagua/recipe_catalog.h>
#include <bagua/system.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace bagua::cli {
namespace {
namespace fs = std::filesystem;

std::string one_line(std::string s, size_t width) {
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  if (width > 3 && s.size() > width) s = s.substr(0, width - 3) + "...";
  return s;
}

int list_recipes(bool as_json) {
  auto entries = list_recipe_catalog();
  if (as_json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : entries)
      out.push_back({{"name", e.name}, {"path", e.path}, {"dir", e.dir}, {"description", e.description},
                     {"algorithm", e.algorithm}, {"model", e.model}, {"shadowed", e.shadowed},
                     {"problem", e.problem}});
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  if (entries.empty()) {
    std::cout << "no recipes: the catalog directories are " << (recipe_catalog_dirs().empty() ? std::string("(none)")
                                                                 : recipe_catalog_dirs().front())
              << " (set BAGUA_RECIPE_PATH=DIR[:DIR...] to add yours)\n";
    return kExitOk;
  }
  auto model_name = [](const CatalogEntry& e) {
    return one_line(e.model.empty() ? "-" : fs::path(e.model).filename().string(), 24);
  };
  size_t w_name = 4, w_alg = 9, w_model = 5;
  for (const auto& e : entries) {
    w_name = std::max(w_name, e.name.size());
    w_alg = std::max(w_alg, e.algorithm.size());
    w_model = std::max(w_model, model_name(e).size());
  }
  std::string dir;
  for (const auto& e : entries) {
    if (e.dir != dir) {
      dir = e.dir;
      std::cout << (&e == &entries.front() ? "" : "\n") << dir << ":\n";
    }
    std::string name = e.name + std::string(w_name - e.name.size(), ' ');
    std::string alg = e.algorithm + std::string(w_alg - e.algorithm.size(), ' ');
    std::string text = e.problem.empty() ? e.description : "(unreadable: " + e.problem + ")";
    if (e.shadowed) text = "(hidden by an earlier directory) " + text;
    std::string model = model_name(e);
    model += std::string(w_model - model.size(), ' ');
    std::cout << "  " << name << "  " << alg << "  " << model << "  " << one_line(text, 100) << "\n";
  }
  return kExitOk;
}

std::string leaf_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

void leaves(const nlohmann::json& v, const std::string& path, std::vector<std::pair<std::string, std::string>>& out) {
  if (v.is_object() && !v.empty()) {
    for (auto it = v.begin(); it != v.end(); ++it) leaves(*it, path.empty() ? it.key() : path + "." + it.key(), out);
  } else if (v.is_array() && !v.empty()) {
    for (size_t i = 0; i < v.size(); ++i) leaves(v[i], path + "[" + std::to_string(i) + "]", out);
  } else {
    out.emplace_back(path, leaf_text(v));
  }
}

int show_recipe(const std::string& name, const std::vector<std::string>& overrides) {
  std::string path = locate_recipe_argument(name);
  Recipe r;
  try {
    RecipeLoadOptions options;
    options.check_files = false;  // showing needs no data on this machine
    r = load_recipe(path, overrides, options);
  } catch (const RecipeError& e) {
    return report_invalid_recipe(e, path);
  }
  std::cout << "# " << path << (r.description.empty() ? "" : ": " + r.description) << "\n";
  for (size_t i = 0; i < r.origin.files.size(); ++i)
    std::cout << "# " << (i == 0 ? "recipe " : "base   ") << r.origin.files[i].path << "  file sha256 "
              << r.origin.files[i].sha256 << "\n";
  std::vector<std::pair<std::string, std::string>> items;
  leaves(r.resolved, "", items);
  size_t width = 0;
  for (const auto& [k, v] : items) width = std::max(width, k.size() + 2 + std::min<size_t>(v.size(), 60));
  for (const auto& [k, v] : items) {
    std::string line = k + ": " + v;
    std::string from = "(default)";
    if (auto it = r.origin.values.find(k); it != r.origin.values.end()) from = it->second.to_string();
    std::cout << line << std::string(line.size() < width ? width - line.size() : 0, ' ') << "  # " << from << "\n";
  }
  return kExitOk;
}

int copy_recipe(const std::string& name, const std::string& dest, bool force) {
  std::string path = locate_recipe_argument(name);
  std::error_code ec;
  std::string target = dest;
  if (fs::is_directory(dest, ec)) target = (fs::path(dest) / fs::path(path).filename()).string();
  if (fs::exists(target, ec) && !force)
    throw Error(target + " exists; --force replaces it", true);
  std::string text;
  try {
    text = standalone_recipe_text(path, target);
  } catch (const RecipeError& e) {
    return report_invalid_recipe(e, path);
  }
  write_file_atomically(target, text);
  // The copy must load from where it now is (its paths were rebased).
  try {
    RecipeLoadOptions options;
    options.check_files = false;
    load_recipe(target, {}, options);
  } catch (const RecipeError& e) {
    std::cerr << "warning: the copy does not validate as it stands (it may need environment variables):\n";
    for (const auto& d : e.diagnostics()) std::cerr << "  " << d.to_string() << "\n";
  }
  std::cout << "copied " << path << " to " << target << " (extends merged, relative paths rebased)\n";
  return kExitOk;
}

int pin_recipe(const std::string& name, bool check_only) {
  std::string path = locate_recipe_argument(name);
  PinResult pin;
  try {
    pin = pin_recipe_bases(path);
  } catch (const RecipeError& e) {
    return report_invalid_recipe(e, path);
  }
  if (pin.bases.empty()) {
    std::cout << path << ": no extends to pin\n";
    return kExitOk;
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream old;
  old << in.rdbuf();
  const bool changed = old.str() != pin.text;
  if (check_only) {
    for (const auto& b : pin.bases) {  // each base that fails the check, by name
      if (b.stale())
        std::cout << "stale pin: " << b.base << ": pinned file sha256 " << b.pinned << ", its file sha256 now "
                  << b.current << "\n";
      else if (b.pinned.empty())
        std::cout << "not pinned: " << b.base << " (file sha256 " << b.current << ")\n";
    }
    std::cout << path << (changed ? ": bases not pinned to their current content\n" : ": every base pinned and current\n");
    return changed ? 1 : kExitOk;
  }
  if (changed) write_file_atomically(path, pin.text);
  for (const auto& b : pin.bases) std::cout << "pinned " << b.base << " (file sha256 " << b.current << ")\n";
  std::cout << path << (changed ? ": updated\n" : ": already pinned\n");
  return kExitOk;
}

const CommandRegistration kRecipes{
    "recipes", "The catalog of shared recipes: list, show, copy, pin",
    [](CLI::App& sub) -> CommandRunner {
      sub.require_subcommand(1);
      auto state = std::make_shared<std::tuple<std::string, std::string, std::vector<std::string>, bool, bool>>();
      auto& [name, dest, overrides, flag_a, flag_b] = *state;
      CLI::App* list = sub.add_subcommand("list", "The recipes of the catalog: name, algorithm, model, description");
      list->add_flag("--json", flag_a, "As JSON");
      CLI::App* show = sub.add_subcommand("show", "A recipe resolved, each key with the file:line that set it");
      show->add_option("recipe", name, "Catalog name, recipe file, or run directory")->required();
      show->add_option("--set", overrides, "Override a key first: key.path=value; repeatable")->allow_extra_args(false);
      CLI::App* copy = sub.add_subcommand("copy", "A standalone copy (extends merged, paths rebased) to edit");
      copy->add_option("recipe", name, "Catalog name or recipe file")->required();
      copy->add_option("dest", dest, "File (or directory) to write")->required();
      copy->add_flag("--force", flag_a, "Replace DEST when it exists");
      CLI::App* pin = sub.add_subcommand("pin", "Write each extends base's current file SHA-256 into the recipe");
      pin->add_option("recipe", name, "Recipe file (or catalog name)")->required();
      pin->add_flag("--check", flag_b,
                    "Change nothing; name each base that is unpinned or whose pin is stale, and exit 1 if any");
      sub.footer(
          "The catalog is every *.yaml in each directory of BAGUA_RECIPE_PATH (colon-separated),\n"
          "then the recipes shipped with bagua; a name found in an earlier directory wins.\n"
          "A catalog name also works wherever a recipe file does (bagua validate/run/diff NAME)\n"
          "and as a base: extends: [{recipe: NAME, sha256: ...}].\n\n"
          "Exit status: 0 done, 1 (pin --check) a pin is missing or stale, 2 bad input.\n\n"
          "Examples:\n"
          "  BAGUA_RECIPE_PATH=/shared/team-recipes bagua recipes list\n"
          "  bagua recipes show fashion-mnist-mlp\n"
          "  bagua recipes copy fashion-mnist-mlp my-experiment.yaml\n"
          "  bagua recipes pin my-experiment.yaml\n");
      return [state, list, show, copy, pin]() -> int {
        auto& [name, dest, overrides, flag_a, flag_b] = *state;
        if (list->parsed()) return list_recipes(flag_a);
        if (show->parsed()) return show_recipe(name, overrides);
        if (copy->parsed()) return copy_recipe(name, dest, flag_a);
        if (pin->parsed()) return pin_recipe(name, flag_b);
        return kExitInvalidInput;
      };
    }};

}  // namespace
}  // namespace bagua::cli
