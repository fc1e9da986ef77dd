// --set key.path=value: change a recipe from the command line.
//
// Paths use dots between keys and [N] (or .N) for list items:
// `data.batch_size=128`, `optimizers[0].lr=0.1`. The value is parsed as
// YAML, so `--set 'optimizers=[{type: adam}]'` replaces a whole list.
// Missing mappings on the way are created; a key the schema does not know
// (in any variant) is an error that says so, with a suggestion.
#include "stages.h"

namespace bagua::recipe {
namespace {

struct Segment {
  std::string key;  // empty for an index
  size_t index = 0;
  bool is_index() const { return key.empty(); }
};

bool parse_path(const std::string& text, std::vector<Segment>& out, std::string& error) {
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '[') {
      size_t close = text.find(']', i);
      std::string digits = close == std::string::npos ? "" : text.substr(i + 1, close - i - 1);
      if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) {
        error = "malformed list index at " + json_quote(text.substr(i)) + " (expected [N])";
        return false;
      }
      out.push_back({"", std::stoul(digits)});
      i = close + 1;
      if (i < text.size() && text[i] == '.') ++i;
      continue;
    }
    size_t end = text.find_first_of(".[", i);
    std::string part = text.substr(i, end == std::string::npos ? std::string::npos : end - i);
    if (part.empty()) {
      error = "empty key in path " + json_quote(text);
      return false;
    }
    if (std::all_of(part.begin(), part.end(), ::isdigit)) out.push_back({"", std::stoul(part)});
    else out.push_back({part, 0});
    if (end == std::string::npos) break;
    i = text[end] == '.' ? end + 1 : end;
    if (text[end] == '.' && i == text.size()) {
      error = "path ends with a dot";
      return false;
    }
  }
  if (out.empty()) error = "empty key path";
  return !out.empty();
}

}  // namespace

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
    std::vector<Segment> segments;
    std::string error;
    if (!parse_path(key_text, segments, error)) {
      diags.add({file, 1, 1, true}, key_text, "malformed override: " + error);
      continue;
    }
    std::vector<std::string> names;
    for (const auto& s : segments) names.push_back(s.is_index() ? std::to_string(s.index) : s.key);
    if (names[0] == "extends") {
      diags.add({file, 1, 1, true}, key_text, "extends cannot be overridden (it is resolved before overrides)");
      continue;
    }
    std::string unknown;
    std::vector<std::string> known;
    if (!schema_knows_path(schema, names, unknown, known)) {
      std::string near = closest_match(unknown, known);
      std::string msg = "override of an unknown key " + json_quote(unknown);
      if (!near.empty()) msg += " (did you mean " + json_quote(near) + "?)";
      else if (!known.empty()) msg += " (expected one of: " + join(known) + ")";
      else msg += " (the value there is not a mapping or list)";
      diags.add({file, 1, 1, true}, key_text, msg);
      continue;
    }
    // Walk to the parent, creating mappings on the way.
    json* node = &tree.doc;
    std::string path;
    bool failed = false;
    for (size_t i = 0; i + 1 < segments.size() && !failed; ++i) {
      const Segment& s = segments[i];
      if (s.is_index()) {
        if (!node->is_array() || s.index >= node->size()) {
          diags.add({file, 1, 1, true}, key_text,
                    "cannot set " + key_text + ": " + (path.empty() ? "the recipe" : path) +
                    (node->is_array() ? " has " + std::to_string(node->size()) + " items" : " is not a list"));
          failed = true;
          break;
        }
        node = &(*node)[s.index];
        path = index_path(path, s.index);
      } else {
        if (node->is_null()) *node = json::object();
        if (!node->is_object()) {
          diags.add({file, 1, 1, true}, key_text, "cannot set " + key_text + ": " + path + " is " +
                    describe_found(*node) + ", not a mapping");
          failed = true;
          break;
        }
        path = child_path(path, s.key);
        if (!node->contains(s.key) || (*node)[s.key].is_null()) {
          (*node)[s.key] = json::object();
          tree.values[path] = {file, 1, 1, true};
        }
        node = &(*node)[s.key];
      }
    }
    if (failed) continue;
    const Segment& last = segments.back();
    std::string target;
    if (last.is_index()) {
      if (!node->is_array() || last.index >= node->size()) {
        diags.add({file, 1, 1, true}, key_text, "cannot set " + key_text + ": " +
                  (path.empty() ? "the recipe" : path) +
                  (node->is_array() ? " has " + std::to_string(node->size()) + " items" : " is not a list"));
        continue;
      }
      target = index_path(path, last.index);
    } else {
      if (node->is_null()) *node = json::object();
      if (!node->is_object()) {
        diags.add({file, 1, 1, true}, key_text, "cannot set " + key_text + ": " + path + " is " +
                  describe_found(*node) + ", not a mapping");
        continue;
      }
      target = child_path(path, last.key);
    }
    Diagnostics value_diags;
    SourceTree value = read_yaml_text(text.substr(eq + 1), file, static_cast<int>(eq) + 1, value_diags);
    if (!value_diags.empty()) {
      for (auto& d : value_diags.items) d.key_path = key_text;
      diags.items.insert(diags.items.end(), value_diags.items.begin(), value_diags.items.end());
      continue;
    }
    if (last.is_index()) (*node)[last.index] = value.doc;
    else (*node)[last.key] = value.doc;
    tree.erase_positions(target);
    tree.copy_positions(value, "", target);
    tree.keys[target] = {file, 1, 1, true};
    if (text.size() == eq + 1) tree.values[target] = {file, 1, static_cast<int>(eq) + 2, true};
  }
}

}  // namespace bagua::recipe
