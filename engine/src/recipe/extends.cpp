// `extends`: a recipe built on other recipes.
//
// Bases are read recursively (paths relative to the file that names them),
// merged in the order listed, then the extending file is merged on top.
// Mappings merge key by key (unless the override switches variant: another
// format, type or name replaces the whole mapping); lists and scalars replace. A file that extends
// itself, directly or through others, is a cycle and an error. An entry
// {path|recipe, sha256} pins its base: a base whose bytes hash otherwise is
// an error at the sha256, naming the base (or, for a caller that compares
// rather than runs, a StalePin record).
#include "stages.h"

#include <bagua/recipe_catalog.h>

#include <filesystem>

namespace bagua::recipe {
namespace fs = std::filesystem;

namespace {

// A mapping that switches variant (another format, type or algorithm name)
// is replaced, not merged: the old variant's keys mean nothing to the new one.
bool same_variant(const json& base, const json& over) {
  for (const char* key : {"format", "type", "name"})
    if (base.contains(key) && over.contains(key) && base[key] != over[key]) return false;
  return true;
}

void merge_at(SourceTree& base, const SourceTree& over, const json& over_value, json& base_value,
              const std::string& path) {
  for (auto it = over_value.begin(); it != over_value.end(); ++it) {
    std::string child = child_path(path, it.key());
    auto existing = base_value.find(it.key());
    if (existing != base_value.end() && existing->is_object() && it->is_object() &&
        same_variant(*existing, *it)) {
      // Both sides are mappings: merge deeper. The key now reads from `over`.
      if (auto k = over.keys.find(child); k != over.keys.end()) base.keys[child] = k->second;
      if (auto v = over.values.find(child); v != over.values.end()) base.values[child] = v->second;
      merge_at(base, over, *it, *existing, child);
    } else {
      base_value[it.key()] = *it;
      base.erase_positions(child);
      base.copy_positions(over, child, child);
    }
  }
}

// One entry of `extends`, read from the recipe.
struct BaseRef {
  std::string at;            // key path of the entry ("extends", "extends[1]")
  std::string value;         // the path or catalog name as written
  bool catalog = false;      // {recipe: NAME}
  std::string pinned;        // sha256 it must have; empty: not pinned
  std::string pinned_at;     // key path of that sha256
};

bool is_sha256(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) return false;
  return true;
}

struct ExtendsLoader {
  Diagnostics& diags;
  std::vector<RecipeOrigin::File>* files;
  std::vector<RecipeOrigin::StalePin>* stale;  // null: a stale pin is an error
  std::vector<std::string> stack;    // canonical paths being loaded
  std::vector<std::string> display;  // the same, as named

  // The entries of tree.doc["extends"]; malformed ones are reported.
  std::vector<BaseRef> entries(const SourceTree& tree) {
    std::vector<BaseRef> out;
    const json& ext = tree.doc["extends"];
    auto entry = [&](const json& e, const std::string& at) {
      if (e.is_string()) {
        out.push_back({at, e.get<std::string>(), false, "", ""});
        return;
      }
      if (!e.is_object()) {
        diags.add(tree.locate(at), at, "expected a recipe path (or a {path|recipe, sha256} mapping), found " +
                  describe_found(e));
        return;
      }
      BaseRef ref{at, "", false, "", ""};
      bool ok = true;
      for (auto it = e.begin(); it != e.end(); ++it) {
        std::string key_at = child_path(at, it.key());
        if (it.key() != "path" && it.key() != "recipe" && it.key() != "sha256") {
          diags.add(tree.locate_key(key_at), key_at, "unknown key " + json_quote(it.key()) +
                    " in an extends entry (expected path or recipe, and optionally sha256)");
          ok = false;
        } else if (!it->is_string() || it->get<std::string>().empty()) {
          diags.add(tree.locate(key_at), key_at, "expected a non-empty string, found " + describe_found(*it));
          ok = false;
        }
      }
      if (!ok) return;
      if (e.contains("path") == e.contains("recipe")) {
        diags.add(tree.locate(at), at, "an extends entry names its base with exactly one of path: FILE or "
                  "recipe: NAME (a recipe of the catalog)");
        return;
      }
      ref.catalog = e.contains("recipe");
      ref.value = e.at(ref.catalog ? "recipe" : "path").get<std::string>();
      if (e.contains("sha256")) {
        ref.pinned = e.at("sha256").get<std::string>();
        ref.pinned_at = child_path(at, "sha256");
        if (!is_sha256(ref.pinned)) {
          diags.add(tree.locate(ref.pinned_at), ref.pinned_at,
                    "expected a SHA-256 (64 lowercase hex digits, as sha256sum prints), found " +
                    describe_found(e.at("sha256")));
          return;
        }
      }
      out.push_back(ref);
    };
    if (ext.is_string()) {
      entry(ext, "extends");
    } else if (ext.is_array()) {
      for (size_t i = 0; i < ext.size(); ++i) entry(ext[i], index_path("extends", i));
    } else {
      diags.add(tree.locate("extends"), "extends",
                "expected a recipe path or a list of recipe paths, found " + describe_found(ext));
    }
    return out;
  }

  SourceTree load(const std::string& path) {
    std::error_code ec;
    std::string canonical = fs::weakly_canonical(path, ec).string();
    stack.push_back(canonical);
    display.push_back(path);
    std::string sha;
    SourceTree tree = read_yaml_file(path, diags, &sha);
    if (files && !sha.empty()) files->push_back({path, sha});
    tree.newer_schema = refuse_newer_schema(tree, diags);  // each file of the chain, a base as much as the recipe
    SourceTree merged;
    bool have_base = false;
    if (tree.doc.is_object() && tree.doc.contains("extends")) {
      for (const BaseRef& ref : entries(tree)) {
        SourcePos where = tree.locate(ref.at);
        fs::path base_path;
        if (ref.catalog) {
          std::optional<std::string> found = find_catalog_recipe(ref.value);
          if (!found) {
            diags.add(where, ref.at, "no recipe named " + json_quote(ref.value) + " in the catalog (" +
                      join(recipe_catalog_dirs(), ", ") + "; bagua recipes list shows them)");
            continue;
          }
          base_path = *found;
        } else {
          base_path = fs::path(ref.value);
          if (base_path.is_relative()) base_path = fs::path(path).parent_path() / base_path;
        }
        std::string base_display = base_path.lexically_normal().string();
        std::string base_canonical = fs::weakly_canonical(base_path, ec).string();
        auto seen = std::find(stack.begin(), stack.end(), base_canonical);
        if (seen != stack.end()) {
          std::vector<std::string> chain(display.begin() + (seen - stack.begin()), display.end());
          chain.push_back(base_display);
          diags.add(where, ref.at, "extends cycle: " + join(chain, " -> "));
          continue;
        }
        if (!fs::exists(base_path)) {
          diags.add(where, ref.at, "extended recipe not found: " + base_display +
                    " (relative paths are relative to the file that says extends)");
          continue;
        }
        if (fs::is_directory(base_path)) {
          diags.add(where, ref.at, "extended recipe is a directory, expected a file: " + base_display);
          continue;
        }
        size_t first_file = files ? files->size() : 0;
        SourceTree base = load(base_display);
        if (!ref.pinned.empty() && files && first_file < files->size() &&
            (*files)[first_file].sha256 != ref.pinned) {
          const std::string& current = (*files)[first_file].sha256;
          const SourcePos at = tree.locate(ref.pinned_at);
          if (stale) {
            stale->push_back({base_display, ref.pinned, current, {at.file, at.line, at.column}});
          } else {
            diags.add(at, ref.pinned_at,
                      "pinned base " + base_display + " has changed: its file SHA-256 is " + current +
                      ", pinned " + ref.pinned + " (review what changed in it, e.g. `bagua diff`; `bagua recipes pin " +
                      path + "` then pins the new content)");
          }
        }
        if (base.doc.is_object()) {  // a run's name and description are never inherited
          for (const char* own : {"name", "description"}) {
            base.doc.erase(own);
            base.erase_positions(own);
          }
        }
        if (!have_base) {
          merged = std::move(base);
          have_base = true;
        } else {
          merge_trees(merged, base);
        }
      }
      tree.doc.erase("extends");
      tree.erase_positions("extends");
    }
    stack.pop_back();
    display.pop_back();
    if (!have_base) return tree;
    if (tree.doc.is_object()) merge_trees(merged, tree);
    merged.values[""] = tree.values[""];
    return merged;
  }
};

}  // namespace

void merge_trees(SourceTree& base, const SourceTree& over) {
  if (!base.doc.is_object()) base.doc = json::object();
  merge_at(base, over, over.doc, base.doc, "");
  base.newer_schema = base.newer_schema || over.newer_schema;
}

SourceTree load_with_extends(const std::string& display_path, Diagnostics& diags,
                             std::vector<RecipeOrigin::File>* files, std::vector<RecipeOrigin::StalePin>* stale) {
  std::vector<RecipeOrigin::File> own;  // pins are checked against it
  ExtendsLoader loader{diags, files ? files : &own, stale, {}, {}};
  return loader.load(display_path);
}

}  // namespace bagua::recipe
