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

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      size_t cost = (std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                     std::tolower(static_cast<unsigned char>(b[j - 1]))) ? 0 : 1;
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + cost});
      diag = up;
    }
  }
  return row[b.size()];
}
}  // namespace

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::string::npos;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  // A typo: a few edits, fewer than half the word.
  size_t limit = std::max<size_t>(1, std::min<size_t>(3, (word.size() + 1) / 2));
  if (best_distance <= limit) return best;
  // A word with its separators dropped or changed: "batchsize", "batch-size".
  auto squash = [](const std::string& s) {
    std::string r;
    for (char ch : s)
      if (std::isalnum(static_cast<unsigned char>(ch))) r += static_cast<char>(std::tolower(ch));
    return r;
  };
  for (const auto& c : candidates)
    if (squash(c) == squash(word)) return c;
  return "";
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::ostringstream out;
  for (size_t i = 0; i < items.size(); ++i) out << (i ? sep : "") << items[i];
  return out.str();
}

}  // namespace bagua::recipe
