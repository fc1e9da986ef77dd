// What made a run: OUTPUT/provenance.json, also kept in every checkpoint's
// meta.json, and what a resume checks against it.
//
//   {"format": 1,
//    "recipe": {"sha256": <of the canonical resolved recipe>, "source": FILE,
//               "files": [{"path", "sha256"}, ...],   // the recipe, then its bases
//               "overrides": ["key=value", ...],      // --set, in order
//               "env_names": ["NAME", ...],           // variables expanded (never their values)
//               "origins": {"key.path": "FILE:LINE:COL", ...},  // where each written value was set
//               "resolved": {...}},                   // the resolved recipe itself
//    "model": {"path", "size", "sha256"},
//    "data": [{"key": "data.train.images", "path", "size", "sha256"}, ...],
//    "bagua": {"version", "revision"},
//    "libraries": {"libtorch", "cuda", "nccl"},       // "none" when not built in
//    "world": {"nodes", "workers", "hosts": [...]},   // hosts by node rank
//    "created": "2026-11-24T17:00:00Z"}
//
// The canonical recipe is the resolved tree as JSON with sorted keys and
// no whitespace: key order, comments and formatting do not change its hash.
// The recipe half (everything but libraries and world) needs no LibTorch.
#pragma once

#include <bagua/recipe.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace bagua {

inline constexpr int kProvenanceFormat = 1;

std::string canonical_recipe_sha256(const nlohmann::json& resolved);

// The recipe, model, data and bagua parts of a run's provenance. Files are
// hashed through cached_file_sha256() (bagua/sha256.h): once per size and
// modification time (a file of 256 MiB or more is announced on stderr when
// it is hashed). `bagua run`'s agent calls it before starting the workers,
// so rank 0 finds the digests cached. Throws bagua::Error when a file
// cannot be read.
nlohmann::json recipe_provenance(const Recipe& recipe);

// The keys of a resolved recipe that a resume compares: those that change
// what training computes. Not compared: name, description, schema_version,
// output, checkpoint, distributed (the world size has its own check),
// train.epochs, train.max_steps, train.log_every_steps, train.eval_every,
// train.threads, model.torchscript (its SHA-256 is compared instead),
// how the same arithmetic is carried out (optimizers[N].fused,
// algorithm.flatten, algorithm.bucket_size), and
// data (checkpoint.allow_data_change governs data.batch_size, data.sampler
// and data.train; data.eval and data.cache do not change the weights).
bool recipe_key_changes_training(const std::string& key_path);

struct ProvenanceCheck {
  std::vector<std::string> model;     // why the model differs (refused unless allow_model_change)
  std::vector<std::string> recipe;    // each key whose meaning changed (unless allow_recipe_change)
  std::vector<std::string> warnings;  // a different bagua version, ...
};

// Compares a checkpoint's provenance (`saved`; null for checkpoints older
// than provenance: nothing to compare) with this run's.
ProvenanceCheck compare_provenance(const nlohmann::json& saved, const nlohmann::json& now);

// A short JSON rendering of a value for messages: 0.05, "sgd", [1,2].
std::string short_json(const nlohmann::json& value, size_t max_chars = 80);

}  // namespace bagua
