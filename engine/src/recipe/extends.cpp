// `extends`: a recipe built on other recipes.
//
// Bases are read recursively (paths relative to the file that names them),
// merged in the order listed, then the extending file is merged on top.
// Mappings merge key by key (unless the override switches variant: another
// format, type or name replaces the whole mapping); lists and scalars replace. A file that extends
// itself, directly or through others, is a cycle and an error.
#include "stages.h"

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

struct ExtendsLoader {
  Diagnostics& diags;
  std::vector<std::string> stack;    // canonical paths being loaded
  std::vector<std::string> display;  // the same, as named

  SourceTree load(const std::string& path) {
    std::error_code ec;
    std::string canonical = fs::weakly_canonical(path, ec).string();
    stack.push_back(canonical);
    display.push_back(path);
    SourceTree tree = read_yaml_file(path, diags);
    SourceTree merged;
    bool have_base = false;
    if (tree.doc.is_object() && tree.doc.contains("extends")) {
      const json& ext = tree.doc["extends"];
      std::vector<std::pair<std::string, std::string>> bases;  // (value, path of the value)
      if (ext.is_string()) {
        bases.emplace_back(ext.get<std::string>(), "extends");
      } else if (ext.is_array()) {
        for (size_t i = 0; i < ext.size(); ++i) {
          if (ext[i].is_string()) {
            bases.emplace_back(ext[i].get<std::string>(), index_path("extends", i));
          } else {
            diags.add(tree.locate(index_path("extends", i)), index_path("extends", i),
                      "expected a recipe path, found " + describe_found(ext[i]));
          }
        }
      } else {
        diags.add(tree.locate("extends"), "extends",
                  "expected a recipe path or a list of recipe paths, found " + describe_found(ext));
      }
      for (const auto& [value, at] : bases) {
        SourcePos where = tree.locate(at);
        fs::path base_path = fs::path(value);
        if (base_path.is_relative()) base_path = fs::path(path).parent_path() / base_path;
        std::string base_display = base_path.lexically_normal().string();
        std::string base_canonical = fs::weakly_canonical(base_path, ec).string();
        auto seen = std::find(stack.begin(), stack.end(), base_canonical);
        if (seen != stack.end()) {
          std::vector<std::string> chain(display.begin() + (seen - stack.begin()), display.end());
          chain.push_back(base_display);
          diags.add(where, at, "extends cycle: " + join(chain, " -> "));
          continue;
        }
        if (!fs::exists(base_path)) {
          diags.add(where, at, "extended recipe not found: " + base_display +
                    " (relative paths are relative to the file that says extends)");
          continue;
        }
        if (fs::is_directory(base_path)) {
          diags.add(where, at, "extended recipe is a directory, expected a file: " + base_display);
          continue;
        }
        SourceTree base = load(base_display);
        if (base.doc.is_object()) {  // a run's name is never inherited
          base.doc.erase("name");
          base.erase_positions("name");
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
}

SourceTree load_with_extends(const std::string& display_path, Diagnostics& diags) {
  ExtendsLoader loader{diags, {}, {}};
  return loader.load(display_path);
}

}  // namespace bagua::recipe
