#include "source_tree.h"

#include <bagua/recipe_key_path.h>

#include <algorithm>
#include <sstream>

namespace bagua::recipe {
namespace {

// The maps hold every key the YAML had, some of which may not parse as a
// key path: "under" is by text.
void erase_under(std::map<std::string, SourcePos>& m, const std::string& path) {
  for (auto it = m.lower_bound(path); it != m.end() && it->first.compare(0, path.size(), path) == 0;) {
    if (KeyPath::is_same_or_under(it->first, path)) {
      it = m.erase(it);
    } else {
      ++it;
    }
  }
}

void copy_under(const std::map<std::string, SourcePos>& from, std::map<std::string, SourcePos>& to,
                const std::string& from_path, const std::string& to_path) {
  for (auto it = from.lower_bound(from_path);
       it != from.end() && it->first.compare(0, from_path.size(), from_path) == 0; ++it) {
    if (!KeyPath::is_same_or_under(it->first, from_path)) continue;
    std::string rest = it->first.substr(from_path.size());
    std::string target = to_path;
    if (!rest.empty()) {
      if (rest[0] == '.' && to_path.empty()) rest.erase(0, 1);
      else if (rest[0] != '.' && rest[0] != '[' && !to_path.empty()) rest = "." + rest;
      target += rest;
    }
    to[target] = it->second;
  }
}

}  // namespace

SourcePos SourceTree::locate(const std::string& path) const {
  std::string p = path;
  while (true) {
    if (auto it = values.find(p); it != values.end() && it->second.line > 0) return it->second;
    if (auto it = keys.find(p); it != keys.end() && it->second.line > 0) return it->second;
    if (p.empty()) break;
    p = parent_path(p);
  }
  if (auto it = values.find(""); it != values.end()) return {it->second.file, 1, 1, true};
  return {};
}

SourcePos SourceTree::locate_key(const std::string& path) const {
  if (auto it = keys.find(path); it != keys.end() && it->second.line > 0) return it->second;
  return locate(path);
}

void SourceTree::erase_positions(const std::string& path) {
  erase_under(values, path);
  erase_under(keys, path);
}

void SourceTree::copy_positions(const SourceTree& from, const std::string& from_path,
                                const std::string& to_path) {
  copy_under(from.values, values, from_path, to_path);
  copy_under(from.keys, keys, from_path, to_path);
}

std::string child_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string index_path(const std::string& parent, size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

std::string parent_path(const std::string& path) {
  size_t cut = path.find_last_of(".[");
  if (cut == std::string::npos) return "";
  return path.substr(0, cut);
}

void Diagnostics::add(const SourcePos& pos, const std::string& path, const std::string& message) {
  items.push_back({pos.file, pos.line, pos.column, path, message});
}

std::string json_quote(const std::string& s) { return json(s).dump(); }

std::string describe_found(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return value.get<bool>() ? "true" : "false";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer " + value.dump();
    case json::value_t::number_float: return "number " + value.dump();
    case json::value_t::string: return "string " + value.dump();
    case json::value_t::array: return value.empty() ? "an empty list" : "a list";
    case json::value_t::object: return value.empty() ? "an empty mapping" : "a mapping";
    default: return "a value";
  }
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::ostringstream out;
  for (size_t i = 0; i < items.size(); ++i) out << (i ? sep : "") << items[i];
  return out.str();
}

}  // namespace bagua::recipe
