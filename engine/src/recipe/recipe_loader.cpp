// load_recipe(): the stages of recipe loading, in order, and the error type.
//
//   read + extends -> overrides -> ${VAR} expansion -> schema (walker
//   explains, valijson decides, defaults filled) -> semantic checks -> typed.
//
// Each stage adds diagnostics instead of stopping, so a user sees every
// problem at once; a stage whose input is unusable (no tree) ends the run.
#include "stages.h"

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

}  // namespace
}  // namespace recipe

Recipe load_recipe(const std::string& path, const std::vector<std::string>& overrides,
                   const RecipeLoadOptions& options) {
  using namespace recipe;
  Diagnostics diags;
  SourceTree tree = load_with_extends(path, diags);
  if (!tree.doc.is_object()) fail(diags, path);

  const json& schema = recipe_schema();
  apply_overrides(tree, overrides, schema, diags);
  expand_environment(tree, process_environment(), diags);

  // The name defaults to the file's stem; the output directory to runs/<name>.
  if (!tree.doc.contains("name")) tree.doc["name"] = std::filesystem::path(path).stem().string();
  SchemaFindings findings = check_against_schema(tree, schema, diags);
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
  Recipe r = to_typed_recipe(tree.doc);
  r.source = path;
  r.notes = sorted(std::move(notes.items), path);
  return r;
}

std::string resolved_recipe_yaml(const Recipe& recipe) { return recipe::to_yaml(recipe.resolved); }

}  // namespace bagua
