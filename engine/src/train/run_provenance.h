// The run's provenance.json (bagua/provenance.h): gathered once at start,
// checked against a checkpoint's on resume, written by rank 0 and kept in
// every checkpoint's meta.json.
#pragma once

#include <bagua/communication.h>
#include <bagua/recipe.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <string>

namespace bagua::train {

// Collective over `group`: rank 0 builds the provenance (hashing the model
// and data files through the hash cache), every rank gives its host name,
// and every rank returns the same JSON. A file rank 0 cannot read throws a
// user Error on every rank.
nlohmann::json gather_provenance(const Recipe& recipe, int rank, int world, const ProcessGroupPtr& group);

// Compares the provenance kept in checkpoint `where` (`saved`, null for
// checkpoints older than provenance) with this run's. A different model
// file or a recipe whose meaning changed throws a user Error listing each
// change, unless checkpoint.allow_model_change / allow_recipe_change (then
// `warn` gets the same list); a different bagua version goes to `warn`.
void check_provenance(const nlohmann::json& saved, const nlohmann::json& now, const Recipe& recipe,
                      const std::string& where, const std::function<void(const std::string&)>& warn);

// Writes OUTPUT/provenance.json through a temporary file renamed into place.
void write_provenance(const std::string& out_dir, const nlohmann::json& provenance);

}  // namespace bagua::train
