// The stages of recipe loading, in the order the loader runs them.
#pragma once

#include "source_tree.h"

#include <bagua/recipe_key_path.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace bagua::recipe {

// --- yaml_reader.cpp --------------------------------------------------------
// Reads one YAML file. Tabs in indentation, syntax errors, duplicate keys,
// non-scalar keys and empty files are reported; on error `tree` is partial.
// `sha256`, when given, receives the SHA-256 of the file's bytes.
SourceTree read_yaml_file(const std::string& display_path, Diagnostics& diags,
                          std::string* sha256 = nullptr);
// Parses YAML text (an override's value); positions are in `file`, line 1,
// shifted right by `column_offset`.
SourceTree read_yaml_text(const std::string& text, const std::string& file, int column_offset,
                          Diagnostics& diags);
// The YAML 1.2 core-schema value of an unquoted scalar: null, bool, int,
// float, or else the string itself.
json resolve_plain_scalar(const std::string& text);

// --- extends.cpp ------------------------------------------------------------
// Reads `display_path` and, recursively, the files it extends; merges them
// (bases in order, then this file; mappings merge, everything else replaces).
// The result has no `extends` key. `name` and `description` are not
// inherited. An entry may be a path, or a mapping {path: P} or
// {recipe: NAME} (found in the catalog) with an optional sha256 that pins
// the base's bytes. `files`, when given, receives every file read with its
// SHA-256, the recipe first, then its bases depth-first. A base whose bytes
// no longer match its pin is an error, or, when `stale` is given, recorded
// there instead.
SourceTree load_with_extends(const std::string& display_path, Diagnostics& diags,
                             std::vector<RecipeOrigin::File>* files = nullptr,
                             std::vector<RecipeOrigin::StalePin>* stale = nullptr);
// A file (the recipe or one of its bases) whose own schema_version is newer
// than this bagua reads gets one error saying so; returns whether it did.
// load_recipe stops after reading when any file did (the merged tree's
// newer_schema says so).
bool refuse_newer_schema(const SourceTree& tree, Diagnostics& diags);
// Deep-merges `over` onto `base` at the root.
void merge_trees(SourceTree& base, const SourceTree& over);

// --- overrides.cpp ----------------------------------------------------------
// Applies "key.path=value" overrides in order. Unknown keys (per the schema)
// and malformed overrides are reported.
void apply_overrides(SourceTree& tree, const std::vector<std::string>& overrides,
                     const json& schema, Diagnostics& diags);

// --- env_expand.cpp ---------------------------------------------------------
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
// Expands ${VAR}, ${VAR:-default} and $$ in every string value; an unquoted
// value that expands to a number, bool or null takes that type.
// `names`, when given, receives each variable referenced (sorted, unique).
void expand_environment(SourceTree& tree, const EnvLookup& lookup, Diagnostics& diags,
                        std::vector<std::string>* names = nullptr);
EnvLookup process_environment();

// --- schema_walker.cpp ------------------------------------------------------
struct SchemaFindings {
  std::vector<std::string> file_paths;  // values whose schema says x-file
  std::vector<std::string> dir_paths;   // x-dir: directories
  std::vector<std::string> glob_paths;  // x-glob: files or patterns of files
  std::vector<std::string> size_paths;  // values whose schema says x-size
};
// Checks `tree.doc` against `schema`, reporting each failure in words at its
// position, and fills defaults (per variant: algorithm, format, type).
SchemaFindings check_against_schema(SourceTree& tree, const json& schema, Diagnostics& diags);
// True when `path` names a key the schema knows in any variant; else fills
// `unknown` with the first unknown step (an index as its digits) and
// `known_here` with the keys the schema knows there.
bool schema_knows_path(const json& schema, const KeyPath& path,
                       std::string& unknown, std::vector<std::string>& known_here);

// --- schema_authority.cpp ---------------------------------------------------
const json& recipe_schema();
// valijson's verdict on `doc`: empty when valid, else its raw error texts
// as (path, message).
std::vector<std::pair<std::string, std::string>> valijson_errors(const json& doc);

// --- semantic_checks.cpp ----------------------------------------------------
struct SemanticOptions {
  bool check_files = true;
};
// Rules the schema cannot express; makes file paths absolute; may change
// the tree (flatten resolved for fused optimizers) and add notes.
void check_semantics(SourceTree& tree, const SchemaFindings& findings,
                     const SemanticOptions& options, Diagnostics& diags, Diagnostics& notes);

// --- csv_columns.cpp --------------------------------------------------------
// A string in a csv source's column keys: a header name, or (made of digits,
// spaces and '-', with a '-') a range "FIRST-LAST" of 0-based indices, both
// included, or a malformed one ("5-", "-1").
enum class ColumnText { kName, kRange, kMalformedRange };
struct ColumnRange {
  int64_t first = 0;
  int64_t last = 0;  // may be < first: the semantic checks refuse it
};
// Which kind `text` is; fills `range` for kRange.
ColumnText classify_column_text(const std::string& text, ColumnRange* range);
// The column keys (target_column, input_columns, exclude_columns) of the csv
// source at `source` ("data.train"), and normalize's {mean, std} lists of a
// csv or idx source, as far as the recipe alone can tell.
void check_data_source_columns(SourceTree& tree, const std::string& source, Diagnostics& diags);

// --- typed_recipe.cpp -------------------------------------------------------
// Converts a checked, defaults-filled tree into the typed Recipe.
Recipe to_typed_recipe(const json& doc);

// --- yaml_writer.cpp --------------------------------------------------------
std::string to_yaml(const json& doc);

}  // namespace bagua::recipe
