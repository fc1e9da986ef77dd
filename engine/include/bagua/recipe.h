// The recipe: one YAML file that describes a whole training run.
//
// load_recipe() reads a recipe, follows its `extends` chain, applies
// `--set key.path=value` overrides, expands ${VAR} and ${VAR:-default} from
// the environment, checks it against schemas/recipe.schema.json (embedded in
// libbagua) and against the rules a schema cannot express, fills every
// default, and returns a typed Recipe. Nothing may run before this succeeds.
//
// On any problem it throws RecipeError carrying every diagnostic at once,
// sorted by position, each formatted as
//     FILE:LINE:COL: key.path: what is wrong (expected ..., found ...)
// where the position is where the offending value (or key) was written,
// following `extends`. RecipeError is a user error (the CLI exits 2). The
// typed Recipe it returns is plain values: bagua/recipe_spec.h.
#pragma once

#include <bagua/errors.h>
#include <bagua/recipe_spec.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bagua {

// An invalid recipe: every diagnostic found, sorted by file and position.
class RecipeError : public Error {
 public:
  explicit RecipeError(std::vector<Diagnostic> diagnostics);
  const std::vector<Diagnostic>& diagnostics() const { return diagnostics_; }

 private:
  std::vector<Diagnostic> diagnostics_;
};

struct RecipeLoadOptions {
  // Check that files named by the recipe (model, data) exist. A worker
  // re-reading a recipe its launcher already validated may skip this.
  bool check_files = true;
  // A pinned base that changed is recorded in Recipe::origin.stale_pins
  // instead of refused: for comparing (bagua diff), never for running.
  bool allow_stale_pins = false;
};

// Loads, checks and types the recipe at `path`; `overrides` are
// "key.path=value" strings (the value is parsed as YAML), applied in order
// after `extends` and before validation. Throws RecipeError when invalid.
Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides = {},
                   const RecipeLoadOptions& options = {});

// The resolved recipe as YAML text (what `bagua validate --print` shows and
// what a run records as recipe.resolved.yaml); loading it gives the same Recipe.
std::string resolved_recipe_yaml(const Recipe& recipe);

// The JSON Schema of recipes (schemas/recipe.schema.json, embedded at build time).
const std::string& recipe_schema_text();

// Parses a byte size: a non-negative integer count of bytes, or a number
// with a unit B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB
// (powers of 1024), e.g. "10MiB". Empty when malformed or too large.
std::optional<int64_t> parse_byte_size(std::string_view text);

}  // namespace bagua
