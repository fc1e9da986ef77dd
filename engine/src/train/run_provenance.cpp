#include "train/run_provenance.h"

#include <bagua/errors.h>
#include <bagua/provenance.h>
#include <bagua/recipe_key_path.h>
#include <bagua/system.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

namespace bagua::train {
namespace fs = std::filesystem;

namespace {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}


// A run started from a run directory (bagua run runs/NAME) loads that
// directory's recipe.resolved.yaml: the files, --set list and variables
// that made the recipe are the earlier run's, so they are carried over,
// and this run's own --set (bagua run runs/NAME --set k=v) is added to
// them: appended to the list, and the origin of each key it set.
void carry_over_origin(const Recipe& recipe, nlohmann::json& p) {
  fs::path source(recipe.source);
  if (source.filename() != "recipe.resolved.yaml") return;
  std::ifstream in(source.parent_path() / "provenance.json");
  if (!in) return;
  nlohmann::json earlier = nlohmann::json::parse(in, nullptr, false);
  if (!earlier.is_object() || !earlier.contains("recipe") || !earlier["recipe"].is_object()) return;
  const nlohmann::json& r = earlier["recipe"];
  nlohmann::json& now = p["recipe"];
  const nlohmann::json own_overrides = now["overrides"], own_origins = now["origins"];
  for (const char* key : {"files", "overrides", "env_names", "origins"})
    if (r.contains(key)) now[key] = r[key];
  if (r.contains("source")) now["source"] = r["source"];
  if (!now["overrides"].is_array()) now["overrides"] = nlohmann::json::array();
  nlohmann::json& list = now["overrides"];
  for (const auto& o : own_overrides) {  // a --set given again moves to the end
    list.erase(std::remove(list.begin(), list.end(), o), list.end());
    list.push_back(o);
  }
  if (!now["origins"].is_object()) now["origins"] = nlohmann::json::object();
  nlohmann::json& origins = now["origins"];
  for (const auto& o : own_overrides) {  // what a --set replaced was set by it, not where it was before
    const std::string text = o.is_string() ? o.get<std::string>() : std::string();
    std::string error;
    const std::optional<KeyPath> key = KeyPath::parse(text.substr(0, text.find('=')), error);
    for (auto it = origins.begin(); key && it != origins.end();)
      it = KeyPath::is_same_or_under(it.key(), key->to_string()) ? origins.erase(it) : std::next(it);
  }
  for (auto it = own_origins.begin(); it != own_origins.end(); ++it)
    if (it->is_string() && it->get<std::string>().rfind("--set ", 0) == 0) origins[it.key()] = *it;
  now["rerun_from"] = source.parent_path().string();
}

}  // namespace

nlohmann::json gather_provenance(const Recipe& recipe, int rank, int world, const ProcessGroupPtr& group) {
  std::string text;
  if (rank == 0) {
    try {
      nlohmann::json p = recipe_provenance(recipe);
      carry_over_origin(recipe, p);
      LibraryVersions v = library_versions();
      p["libraries"] = {{"libtorch", v.libtorch}, {"cuda", v.cuda}, {"nccl", v.nccl}};
      p["created"] = utc_now();
      text = p.dump();
    } catch (const std::exception& e) {
      text = std::string("!") + e.what();
    }
  }
  broadcast_object(text, 0, group);
  if (!text.empty() && text[0] == '!') throw Error("provenance: " + text.substr(1), true);
  nlohmann::json p = nlohmann::json::parse(text);
  // Host names by rank; the nodes' are their first ranks'.
  nlohmann::json hosts = nlohmann::json::array();
  // Workers per node: the launcher's LOCAL_WORLD_SIZE (an elastic job's
  // node count changes from round to round), else the recipe's.
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const int per_node = std::max(1, local && std::atoi(local) > 0 ? std::atoi(local)
                                                                 : world / std::max(1, recipe.distributed.nnodes));
  for (int r = 0; r < world; ++r) {
    std::string name = rank == r ? host_name() : std::string();
    broadcast_object(name, r, group);
    if (r % per_node == 0) hosts.push_back(name);
  }
  p["world"] = {{"nodes", static_cast<int>(hosts.size())}, {"workers", world}, {"hosts", hosts}};
  return p;
}

void check_provenance(const nlohmann::json& saved, const nlohmann::json& now, const Recipe& recipe,
                      const std::string& where, const std::function<void(const std::string&)>& warn) {
  ProvenanceCheck check = compare_provenance(saved, now);
  for (const auto& w : check.warnings) warn("WARNING: resuming " + where + ": " + w);
  auto list = [](const std::vector<std::string>& items) {
    std::string out;
    for (const auto& i : items) out += "\n  " + i;
    return out;
  };
  std::string refused;
  if (!check.model.empty()) {
    if (recipe.checkpoint.allow_model_change) {
      warn("WARNING: resuming " + where + " with another model file (checkpoint.allow_model_change):" +
           list(check.model));
    } else {
      refused += "the model differs from the one the checkpoint's run used:" + list(check.model) +
                 "\nTo continue from these weights anyway, set checkpoint.allow_model_change: true "
                 "(--set checkpoint.allow_model_change=true).";
    }
  }
  if (!check.recipe.empty()) {
    if (recipe.checkpoint.allow_recipe_change) {
      warn("WARNING: resuming " + where + " although the recipe changed (checkpoint.allow_recipe_change):" +
           list(check.recipe));
    } else {
      refused += std::string(refused.empty() ? "" : "\n") +
                 "the recipe's meaning differs from the one the checkpoint's run used:" + list(check.recipe) +
                 "\nTo resume with these changes, set checkpoint.allow_recipe_change: true "
                 "(--set checkpoint.allow_recipe_change=true); to start afresh, checkpoint.resume: never "
                 "or another output.dir.";
    }
  }
  if (!refused.empty()) throw Error("cannot resume from " + where + ": " + refused, true);
}

void write_provenance(const std::string& out_dir, const nlohmann::json& provenance) {
  write_file_atomically((fs::path(out_dir) / "provenance.json").string(), provenance.dump(2) + "\n");
}

}  // namespace bagua::train
