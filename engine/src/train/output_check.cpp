// check_output_dir() (bagua/preflight.h): an output directory belongs to
// the recipe that made it, a resume the workers would refuse is refused
// before they start, and a finished run is not run again.
#include <bagua/checkpoint_meta.h>
#include <bagua/errors.h>
#include <bagua/preflight.h>

#include "train/checkpoint_files.h"
#include "train/run_provenance.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace bagua {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// provenance.json's resolved recipe at `key` ("name", "train"), or null.
const json* resolved_key(const json& provenance, const char* key) {
  if (!provenance.is_object() || !provenance.contains("recipe") || !provenance["recipe"].is_object()) return nullptr;
  const json& recipe = provenance["recipe"];
  if (!recipe.contains("resolved") || !recipe["resolved"].is_object()) return nullptr;
  const json& resolved = recipe["resolved"];
  return resolved.contains(key) ? &resolved[key] : nullptr;
}

// The name of the recipe whose run the directory holds: its provenance.json,
// else its newest checkpoint's; empty when neither says.
std::string owner_of(const fs::path& dir, const std::optional<CheckpointMeta>& newest) {
  std::error_code ec;
  if (fs::is_regular_file(dir / "provenance.json", ec)) {
    try {
      const json p = json::parse(read_text(dir / "provenance.json"));
      if (const json* name = resolved_key(p, "name"); name && name->is_string()) return name->get<std::string>();
    } catch (const std::exception&) {
      // An unreadable provenance.json says nothing about the owner.
    }
  }
  return newest ? newest->recipe : "";
}

// Whether a checkpoint written at the end of a run of `saved` leaves nothing
// for `now` to train: the same length (early_stop included: a run it ended
// goes on with another), data and, for a fixed-size job, world.
bool same_run_length(const json& saved, const json& now, int saved_world, const Recipe& recipe) {
  const auto& d = recipe.distributed;
  // An elastic job's world size changes from round to round: its run is as
  // long at any size (the workers resume a finished run at any size to an
  // empty run, as they resume any run at another size).
  if (!d.elastic() && saved_world != d.nproc_per_node * d.nnodes) return false;
  for (const char* key : {"train", "data"}) {
    const json* a = resolved_key(saved, key);
    const json* b = resolved_key(now, key);
    if (!a || !b) return false;
    if (std::string(key) == "train") {
      for (const char* length : {"epochs", "max_steps", "early_stop"}) {
        if (a->value(length, json()) != b->value(length, json())) return false;
      }
    } else if (*a != *b) {
      return false;
    }
  }
  return true;
}

}  // namespace

OutputDirCheck check_output_dir(const Recipe& recipe, const json& provenance) {
  OutputDirCheck out;
  const fs::path dir = recipe.output.dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  std::optional<CheckpointMeta> newest;
  fs::path newest_dir;
  const auto complete = train::complete_checkpoints((dir / "checkpoints").string());
  if (!complete.empty()) {
    newest_dir = complete.back().second;
    try {
      newest = parse_checkpoint_meta(read_text(newest_dir / "meta.json"));
    } catch (const CheckpointMetaError&) {
      // The workers say what is wrong with it, and try the one before.
    }
  }
  const std::string owner = owner_of(dir, newest);
  if (!owner.empty() && owner != recipe.name && !recipe.checkpoint.allow_recipe_change) {
    throw Error("output.dir " + dir.string() + " holds a run of the recipe " + owner + ", not of " + recipe.name +
                    ": running there would continue or overwrite that run. Give this recipe a directory of its "
                    "own (--set output.dir=runs/" + recipe.name + "); to continue that run under this name, "
                    "set checkpoint.allow_recipe_change: true",
                true);
  }
  if (recipe.checkpoint.resume != "auto" || !newest) return out;
  // The workers make the same check; made here, it is said once, before
  // they start. Warnings (another bagua version) are theirs to give.
  train::check_provenance(newest->provenance, provenance, recipe, newest_dir.string(), [](const std::string&) {});
  if (newest->finished && same_run_length(newest->provenance, provenance, newest->world_size, recipe)) {
    out.finished_at = newest->position.step;
    return out;
  }
  // The load_balancing sampler cuts each epoch's batches per rank: a
  // checkpoint from within an epoch resumes at its own world size only.
  // The workers refuse it too; said here, it is said before they start.
  const DistributedSpec& d = recipe.distributed;
  const TrainingPosition& at = newest->position;
  const int world = d.nproc_per_node * d.nnodes;
  if (recipe.data.sampler.type == SamplerType::kLoadBalancing && !d.elastic() && newest->world_size > 0 &&
      world != newest->world_size && (at.batch_in_epoch > 0 || at.epoch_start > 0)) {
    throw Error("the checkpoint " + newest_dir.string() + " (step " + std::to_string(at.step) + ", within epoch " +
                    std::to_string(at.epoch + 1) + ") was written by " + std::to_string(newest->world_size) +
                    " workers, and data.sampler load_balancing cuts an epoch's batches per rank, so the epoch "
                    "cannot continue at " + std::to_string(world) + ": resume at " +
                    std::to_string(newest->world_size) + " workers (--nproc-per-node " +
                    std::to_string(newest->world_size / std::max(1, d.nnodes)) +
                    ") until a checkpoint at an epoch's end, which resumes at any size (checkpoint.every_steps: "
                    "null writes only those), or start afresh (checkpoint.resume: never)",
                true);
  }
  return out;
}

}  // namespace bagua
