// load_recipe(): the stages of recipe loading, in order, and the error type.
//
//   read + extends -> overrides -> ${VAR} expansion -> schema (walker
//   explains, valijson decides, defaults filled) -> semantic checks -> typed.
//
// Each stage adds diagnostics instead of stopping, so a user sees every
// problem at once; a stage whose input is unusable (no tree) ends the run.
#include "stages.h"

#include <bagua/version.h>

#include <algorithm>
#include <filesystem>

namespace bagua {

namespace {
std::string join_diagnostics(const std::vector<Diagnostic>& diags) {
  std::string out;
  for (const auto& d : diags) out += (out.empty() ? "" : "\n") + d.to_string();
  return out;
}
}  // namespace

RecipeError::RecipeError(std::vector<Diagnostic> diagnostics)
    : Error(join_diagnostics(diagnostics), true), diagnostics_(std::move(diagnostics)) {}

namespace recipe {
namespace {

// Files in the order first seen (the recipe, then its bases, then --set),
// positions within a file in reading order; duplicates dropped.
std::vector<Diagnostic> sorted(std::vector<Diagnostic> items, const std::string& main_file) {
  std::vector<std::string> files{main_file};
  for (const auto& d : items)
    if (std::find(files.begin(), files.end(), d.file) == files.end()) files.push_back(d.file);
  auto rank = [&](const Diagnostic& d) {
    size_t f = std::find(files.begin(), files.end(), d.file) - files.begin();
    return std::make_tuple(f, d.line, d.column, d.key_path, d.message);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Diagnostic& a, const Diagnostic& b) {
    return rank(a) < rank(b);
  });
  items.erase(std::unique(items.begin(), items.end(), [&](const Diagnostic& a, const Diagnostic& b) {
                return rank(a) == rank(b);
              }), items.end());
  return items;
}

[[noreturn]] void fail(Diagnostics& diags, const std::string& path) {
  throw RecipeError(sorted(std::move(diags.items), path));
}

// What each schema version changed, for recipes written for an older one.
// Version 2 only added keys, so a version-1 recipe reads unchanged; an
// entry that renames or removes a key must say here how to update.
struct SchemaChange {
  int version;
  const char* what;
};
constexpr SchemaChange kSchemaChanges[] = {
    {2, "added description, schema_version, pinned extends entries ({path|recipe, sha256}), "
        "checkpoint.allow_model_change and checkpoint.allow_recipe_change; nothing renamed or removed"},
};

}  // namespace

bool refuse_newer_schema(const SourceTree& tree, Diagnostics& diags) {
  if (!tree.doc.is_object()) return false;
  auto it = tree.doc.find("schema_version");
  if (it == tree.doc.end() || !it->is_number_integer()) return false;  // the schema reports other types
  const int64_t declared = it->get<int64_t>();
  if (declared <= kRecipeSchemaVersion) return false;
  diags.add(tree.locate("schema_version"), "schema_version",
            "this recipe was written for recipe schema " + std::to_string(declared) + "; this bagua (" +
            version() + ") reads schema " + std::to_string(kRecipeSchemaVersion) +
            " and older: update bagua, or rewrite the recipe for schema " +
            std::to_string(kRecipeSchemaVersion) + " (docs/recipes.md lists each version's changes)");
  return true;
}

}  // namespace recipe

Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides,
                   const RecipeLoadOptions& options) {
  using namespace recipe;
  Diagnostics diags;
  RecipeOrigin origin;
  origin.overrides = overrides;
  SourceTree tree =
      load_with_extends(path, diags, &origin.files, options.allow_stale_pins ? &origin.stale_pins : nullptr);
  if (!tree.doc.is_object()) fail(diags, path);
  // Any file of the chain (a base too) written for a newer schema ends the
  // load here: its keys would read as unknown, which would mislead.
  if (tree.newer_schema) fail(diags, path);

  const json& schema = recipe_schema();
  apply_overrides(tree, overrides, schema, diags);
  expand_environment(tree, process_environment(), diags, &origin.env_names);

  // The name defaults to the file's stem; the output directory to runs/<name>.
  if (!tree.doc.contains("name")) tree.doc["name"] = std::filesystem::path(path).stem().string();
  // A base that could not be read would have given keys the schema now
  // finds missing: its one error says it; "missing required key" after it
  // would only repeat it.
  const bool base_unread = std::any_of(diags.items.begin(), diags.items.end(), [](const Diagnostic& d) {
    return d.key_path.rfind("extends", 0) == 0;
  });
  SchemaFindings findings = check_against_schema(tree, schema, diags);
  if (base_unread) {
    diags.items.erase(std::remove_if(diags.items.begin(), diags.items.end(),
                                     [](const Diagnostic& d) {
                                       return d.message.rfind("missing required key", 0) == 0;
                                     }),
                      diags.items.end());
  }
  if (diags.empty()) {
    // The walker found nothing: valijson must agree, or its words are shown.
    for (const auto& [where, message] : valijson_errors(tree.doc))
      diags.add(tree.locate(where), where, "schema: " + message);
  }
  Diagnostics notes;
  check_semantics(tree, findings, {options.check_files}, diags, notes);
  if (!diags.empty()) fail(diags, path);

  if (!tree.doc["output"].contains("dir"))
    tree.doc["output"]["dir"] = "runs/" + tree.doc["name"].get<std::string>();
  if (auto v = tree.doc.find("schema_version"); v != tree.doc.end() && v->is_number_integer() &&
                                                  v->get<int64_t>() < kRecipeSchemaVersion) {
    for (const SchemaChange& change : kSchemaChanges)
      if (change.version > v->get<int64_t>())
        notes.add(tree.locate("schema_version"), "schema_version",
                  "schema " + std::to_string(change.version) + " " + change.what);
  }
  Recipe r = to_typed_recipe(tree.doc);
  r.source = path;
  for (const auto& [key, pos] : tree.values)
    if (pos.line > 0 || pos.file.rfind("--set ", 0) == 0) origin.values[key] = {pos.file, pos.line, pos.column};
  origin.file_keys = findings.file_paths;
  r.origin = std::move(origin);
  r.notes = sorted(std::move(notes.items), path);
  return r;
}

std::string resolved_recipe_yaml(const Recipe& recipe) { return recipe::to_yaml(recipe.resolved); }

}  // namespace bagua
