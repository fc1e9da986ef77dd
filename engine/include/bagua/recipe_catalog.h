// Recipes shared across teams: the catalog of named recipes, pinning
// bases, standalone copies, and comparing two recipes key by key.
//
// The catalog is every *.yaml / *.yml file directly in each directory of
// $BAGUA_RECIPE_PATH (colon-separated, in order), then in the recipes
// shipped with bagua. A recipe's catalog name is its file name without the
// extension; where two directories hold the same name, the earlier wins.
// None of this loads LibTorch (libbagua_recipe).
#pragma once

#include <bagua/recipe.h>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace bagua {

// The directories searched, in order: $BAGUA_RECIPE_PATH's, then the
// shipped recipes (installed: PREFIX/share/bagua/recipes; in a build tree:
// the source checkout's recipes/). Only directories that exist.
std::vector<std::string> recipe_catalog_dirs();

struct CatalogEntry {
  std::string name;         // file stem
  std::string path;         // the file
  std::string dir;          // the catalog directory holding it
  std::string description;  // its description: key ("" when none)
  std::string algorithm;    // algorithm.name as written or inherited ("" when unreadable)
  std::string model;        // model.torchscript as written
  bool shadowed = false;    // an earlier directory has a recipe of the same name
  std::string problem;      // why the fields above are missing (unreadable YAML, ...)
};

// Every recipe of the catalog, by directory order, then name.
std::vector<CatalogEntry> list_recipe_catalog();

// The file of catalog recipe `name` (the first directory that has it).
std::optional<std::string> find_catalog_recipe(const std::string& name);

// A recipe argument as users write it: a file, a run directory (its
// recipe.resolved.yaml), or a catalog name. Returns the file to load, or
// throws a user Error saying what was tried.
std::string locate_recipe_argument(const std::string& argument);

// True when `path` is a run directory (holds recipe.resolved.yaml).
bool is_run_directory(const std::string& path);

// A recipe argument resolved, as every command that takes a recipe
// (validate, run, plan, bench) takes it: the file to load, and the
// overrides that go before the user's --set. A run directory whose recorded
// output.dir names it (from this working directory) needs none, so a re-run
// keeps output.dir as written, relative or not; one that was moved, or is
// named from elsewhere, gets output.dir=<the argument as written>, so its
// run still writes into it.
struct RecipeArgument {
  std::string argument;                // as written
  std::string file;                    // locate_recipe_argument(argument)
  bool run_directory = false;
  std::vector<std::string> overrides;  // before the user's
};
RecipeArgument resolve_recipe_argument(const std::string& argument);

// load_recipe() of a resolved argument: its overrides, then `overrides`.
Recipe load_recipe(const RecipeArgument& argument, const std::vector<std::string>& overrides = {},
                   const RecipeLoadOptions& options = {});

// The files recipe `path` extends, directly or through other bases, as far
// as they can be read (depth-first, each once); nothing is validated, so an
// invalid recipe still names its bases. `bagua validate A B ...` uses it
// to check a base only through the recipes that extend it.
std::vector<std::string> recipe_bases(const std::string& path);

// ---- pinning --------------------------------------------------------------

// One `extends` entry of a recipe, as pinning finds it.
struct PinnedBase {
  std::string base;     // the base file
  std::string current;  // the file SHA-256 of its bytes now (what a pin writes)
  std::string pinned;   // the file SHA-256 the entry pinned before; "" when not pinned
  bool stale() const { return !pinned.empty() && pinned != current; }
};

struct PinResult {
  std::string text;                // the recipe file's new text
  std::vector<PinnedBase> bases;  // each entry, in order
};

// The text of recipe `path` with every `extends` entry rewritten as
// {path|recipe: ..., sha256: <current file SHA-256 of the base>}; comments,
// order and every other line are kept. Throws RecipeError when the recipe
// or a base cannot be read.
PinResult pin_recipe_bases(const std::string& path);

// ---- standalone copies ----------------------------------------------------

// The recipe at `path` with its `extends` merged in (nothing else
// resolved: ${VAR}s and unset defaults stay as written) and every relative
// file path rewritten so that it still names the same file when the text
// is saved as `dest`; without `name` (the copy is named after its file) and
// with output.dir runs/<that name>, so a run of the copy never lands in the
// original's run directory. Throws RecipeError when the recipe is unreadable.
std::string standalone_recipe_text(const std::string& path, const std::string& dest);

// ---- comparing ------------------------------------------------------------

// One key whose value differs between two resolved recipes. A list or
// mapping present on both sides is compared element by element, so a path
// names the innermost difference ("optimizers[0].lr"); `a` or `b` is null
// (absent) when the key exists on one side only.
struct KeyDifference {
  std::string path;
  std::optional<nlohmann::json> a, b;
};
std::vector<KeyDifference> diff_resolved(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace bagua
