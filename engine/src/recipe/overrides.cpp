// --set key.path=value: change a recipe from the command line.
//
// Paths use dots between keys and [N] (or .N) for list items:
// `data.batch_size=128`, `optimizers[0].lr=0.1`. The value is parsed as
// YAML, so `--set 'optimizers=[{type: adam}]'` replaces a whole list.
// Missing mappings on the way are created; a key the schema does not know
// (in any variant) is an error that says so, with a suggestion.
#include "stages.h"

#include <bagua/recipe_key_path.h>

namespace bagua::recipe {

void apply_overrides(SourceTree& tree, const std::vector<std::string>& overrides,
                     const json& schema, Diagnostics& diags) {
  for (const auto& text : overrides) {
    const std::string file = "--set " + text;
    size_t eq = text.find('=');
    if (eq == std::string::npos) {
      diags.add({file, 1, 1, true}, "", "malformed override (expected key.path=value, e.g. data.batch_size=128)");
      continue;
    }
    std::string key_text = text.substr(0, eq);
    std::string error;
    std::optional<KeyPath> path = KeyPath::parse(key_text, error);
    if (!path) {
      diags.add({file, 1, 1, true}, key_text, "malformed override: " + error);
      continue;
    }
    if (path->steps()[0].key == "extends") {
      diags.add({file, 1, 1, true}, key_text, "extends cannot be overridden (it is resolved before overrides)");
      continue;
    }
    if (path->steps()[0].key == "schema_version") {
      diags.add({file, 1, 1, true}, key_text,
                "schema_version cannot be overridden (it says which recipe schema the file was written for)");
      continue;
    }
    std::string unknown;
    std::vector<std::string> known;
    if (!schema_knows_path(schema, *path, unknown, known)) {
      std::string near = closest_match(unknown, known);
      std::string msg = "override of an unknown key " + json_quote(unknown);
      if (!near.empty()) msg += " (did you mean " + json_quote(near) + "?)";
      else if (!known.empty()) msg += " (expected one of: " + join(known) + ")";
      else msg += " (the value there is not a mapping or list)";
      diags.add({file, 1, 1, true}, key_text, msg);
      continue;
    }
    // The mapping or list to set the value in, made as needed.
    json* parent = path->make_parent(tree.doc, error, [&](const std::string& made) {
      tree.values[made] = {file, 1, 1, true};
    });
    if (!parent) {
      diags.add({file, 1, 1, true}, key_text, "cannot set " + key_text + ": " + error);
      continue;
    }
    const KeyPath::Step& last = path->steps().back();
    const std::string& target = path->to_string();
    Diagnostics value_diags;
    SourceTree value = read_yaml_text(text.substr(eq + 1), file, static_cast<int>(eq) + 1, value_diags);
    if (!value_diags.empty()) {
      for (auto& d : value_diags.items) d.key_path = key_text;
      diags.items.insert(diags.items.end(), value_diags.items.begin(), value_diags.items.end());
      continue;
    }
    if (last.is_index()) (*parent)[last.index] = value.doc;
    else (*parent)[last.key] = value.doc;
    tree.erase_positions(target);
    tree.copy_positions(value, "", target);
    tree.keys[target] = {file, 1, 1, true};
    if (text.size() == eq + 1) tree.values[target] = {file, 1, static_cast<int>(eq) + 2, true};
  }
}

}  // namespace bagua::recipe
