// bagua diff A B: the keys that differ between two resolved recipes (each a
// recipe file, a catalog name, or a run directory) and, between two run
// directories, the input files (model, data) whose recorded bytes differ.
// No LibTorch.
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
  // A run directory's recorded input files (provenance.json's model and
  // data), by recipe key: {path, size, sha256}. Empty for a recipe.
  std::map<std::string, nlohmann::json> inputs;
  bool run_directory = false;
};

std::map<std::string, nlohmann::json> recorded_inputs(const nlohmann::json& p) {
  std::map<std::string, nlohmann::json> out;
  auto usable = [](const nlohmann::json& r) { return r.is_object() && r.contains("sha256") && r["sha256"].is_string(); };
  if (p.contains("model") && usable(p["model"])) out["model.torchscript"] = p["model"];
  if (p.contains("data") && p["data"].is_array())
    for (const auto& d : p["data"])
      if (usable(d) && d.contains("key") && d["key"].is_string()) out[d["key"].get<std::string>()] = d;
  return out;
}

// A run directory's provenance.json knows where each key was set in the
// recipe files that made the run, and which model and data bytes it read;
// otherwise its recipe.resolved.yaml does. A pinned base that changed is
// compared as it is now, and reported (Side::recipe.origin.stale_pins).
Side load_side(const std::string& argument, const std::vector<std::string>& overrides) {
  Side side;
  side.argument = argument;
  side.file = locate_recipe_argument(argument);  // as recorded: no re-run's output.dir
  RecipeLoadOptions options;
  options.check_files = false;  // comparing needs no data on this machine
  options.allow_stale_pins = true;  // a reviewer needs the differences most then
  side.recipe = load_recipe(side.file, overrides, options);
  for (const auto& [k, where] : side.recipe.origin.values) side.origins[k] = where.to_string();
  side.run_directory = is_run_directory(argument);
  if (side.run_directory) {
    std::ifstream in(fs::path(argument) / "provenance.json");
    nlohmann::json p = in ? nlohmann::json::parse(in, nullptr, false) : nlohmann::json();
    if (!p.is_object()) return side;
    if (p.contains("recipe") && p["recipe"].contains("origins") && p["recipe"]["origins"].is_object())
      for (auto it = p["recipe"]["origins"].begin(); it != p["recipe"]["origins"].end(); ++it)
        if (!side.origins.count(it.key()) || side.origins[it.key()].rfind("--set ", 0) != 0)
          side.origins[it.key()] = it->get<std::string>();
    side.inputs = recorded_inputs(p);
  }
  return side;
}

// One input file whose bytes differ between two runs (same key on both sides).
struct InputDifference {
  std::string key;
  nlohmann::json a, b;  // provenance records: {path, size, sha256}
};

std::vector<InputDifference> diff_inputs(const Side& a, const Side& b) {
  std::vector<InputDifference> out;
  for (const auto& [key, ra] : a.inputs)
    if (auto it = b.inputs.find(key); it != b.inputs.end() && it->second["sha256"] != ra["sha256"])
      out.push_back({key, ra, it->second});
  return out;
}

// A provenance record as diff prints it: what the hash is of, said.
nlohmann::json input_json(const nlohmann::json& r) {
  return {{"path", r.value("path", "")}, {"size", r.value("size", int64_t{-1})}, {"file_sha256", r["sha256"]}};
}

void warn_stale_pins(const char* label, const Side& side) {
  for (const auto& s : side.recipe.origin.stale_pins)
    std::cerr << "warning: " << label << " (" << side.argument << "): pinned base " << s.base
              << " has changed since it was pinned (" << s.where.to_string() << "): pinned file sha256 " << s.pinned
              << ", current file sha256 " << s.current
              << "; compared as it is now (review, then `bagua recipes pin` pins it)\n";
}

nlohmann::json side_json(const Side& side) {
  nlohmann::json stale = nlohmann::json::array();
  for (const auto& s : side.recipe.origin.stale_pins)
    stale.push_back({{"base", s.base}, {"at", s.where.to_string()}, {"pinned_file_sha256", s.pinned},
                     {"current_file_sha256", s.current}});
  return {{"argument", side.argument},
          {"file", side.file},
          {"file_sha256", side.recipe.origin.files.empty() ? "" : side.recipe.origin.files[0].sha256},
          {"canonical_recipe_sha256", canonical_recipe_sha256(side.recipe.resolved)},
          {"run_directory", side.run_directory},
          {"stale_pins", stale}};
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

// "1 key differs", "2 keys and 1 input file differ".
std::string count_text(size_t keys, size_t inputs) {
  std::string out;
  if (keys) out = std::to_string(keys) + (keys == 1 ? " key" : " keys");
  if (inputs) out += (out.empty() ? "" : " and ") + std::to_string(inputs) + (inputs == 1 ? " input file" : " input files");
  return out + (keys + inputs == 1 ? " differs" : " differ");
}

void print_json(const Side& a, const Side& b, const std::vector<KeyDifference>& diffs,
                const std::vector<InputDifference>& inputs) {
  nlohmann::json out;
  out["equal"] = diffs.empty() && inputs.empty();
  out["a"] = side_json(a);
  out["b"] = side_json(b);
  out["differences"] = nlohmann::json::array();
  for (const auto& d : diffs) {
    nlohmann::json item = {{"path", d.path},
                           {"a_from", origin_of(a, d.path, d.a.has_value())},
                           {"b_from", origin_of(b, d.path, d.b.has_value())}};
    if (d.a) item["a"] = *d.a;
    if (d.b) item["b"] = *d.b;
    out["differences"].push_back(item);
  }
  out["inputs_compared"] = a.run_directory && b.run_directory;
  out["input_differences"] = nlohmann::json::array();
  for (const auto& d : inputs)
    out["input_differences"].push_back({{"key", d.key}, {"a", input_json(d.a)}, {"b", input_json(d.b)}});
  std::cout << out.dump(2) << "\n";
}

void print_text(const DiffFlags& f, const Side& a, const Side& b, const std::vector<KeyDifference>& diffs,
                const std::vector<InputDifference>& inputs) {
  for (const auto& d : diffs) {
    const char mark = !d.a ? '+' : !d.b ? '-' : '~';
    std::cout << mark << " " << d.path << ": " << (d.a ? short_json(*d.a) : "(absent)") << " -> "
              << (d.b ? short_json(*d.b) : "(absent)") << "\n"
              << "    A: " << origin_of(a, d.path, d.a.has_value()) << "\n"
              << "    B: " << origin_of(b, d.path, d.b.has_value()) << "\n";
  }
  for (const auto& d : inputs) {
    std::cout << "~ " << d.key << ": file sha256 " << d.a["sha256"].get<std::string>() << " -> "
              << d.b["sha256"].get<std::string>() << "\n"
              << "    A: " << d.a.value("path", "") << " (as " << (fs::path(f.a) / "provenance.json").string()
              << " records it)\n"
              << "    B: " << d.b.value("path", "") << " (as " << (fs::path(f.b) / "provenance.json").string()
              << " records it)\n";
  }
  const bool runs = a.run_directory && b.run_directory;
  if (diffs.empty() && inputs.empty()) {
    std::cout << "same resolved recipe" << (runs ? " and input files" : "")
              << (f.ignore.empty() ? " (canonical recipe sha256 " + canonical_recipe_sha256(a.recipe.resolved) + ")"
                                   : " (ignoring " + std::to_string(f.ignore.size()) + " key(s))")
              << "\n";
  } else {
    std::cout << count_text(diffs.size(), inputs.size()) << " between A (" << f.a << ") and B (" << f.b << ")\n";
  }
}

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
  warn_stale_pins("A", a);
  warn_stale_pins("B", b);
  std::vector<KeyDifference> diffs;
  for (auto& d : diff_resolved(a.recipe.resolved, b.recipe.resolved))
    if (!ignored(d.path, ignore)) diffs.push_back(std::move(d));
  std::vector<InputDifference> inputs;
  for (auto& d : diff_inputs(a, b))
    if (!ignored(d.key, ignore)) inputs.push_back(std::move(d));
  if (f.json) print_json(a, b, diffs, inputs);
  else print_text(f, a, b, diffs, inputs);
  return diffs.empty() && inputs.empty() ? kExitOk : 1;
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
      sub.add_flag("--json", f->json,
                   "As JSON: {equal, a, b, differences: [{path, a, b, a_from, b_from}], inputs_compared, "
                   "input_differences: [{key, a, b}]}");
      sub.footer(
          "Both sides are resolved first (extends merged, --set applied, ${VAR}s expanded, defaults\n"
          "filled), so two recipes written differently but meaning the same are equal. Each\n"
          "difference shows both values and where each side set it (FILE:LINE:COL, the --set, or\n"
          "default). A run directory is compared as the run recorded it (recipe.resolved.yaml, with\n"
          "the positions from its provenance.json); between two run directories, each input file\n"
          "(model, data) whose recorded file sha256 differs is listed too, under its recipe key. A\n"
          "pinned base that changed is compared as it is now, with a warning naming it and its pinned\n"
          "and current file sha256.\n\n"
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
