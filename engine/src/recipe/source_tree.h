// A recipe as a JSON tree plus where each key and value was written.
//
// Every stage of recipe loading (YAML reading, extends, overrides, env
// expansion, schema checks, semantic checks) works on a SourceTree so that
// any diagnostic can point at FILE:LINE:COL. Paths name nodes the way users
// read them: "data.train.images", "optimizers[0].lr"; the root is "".
#pragma once

#include <bagua/recipe.h>

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "common/closest_match.h"

namespace bagua::recipe {

using json = nlohmann::json;

struct SourcePos {
  std::string file;
  int line = 0;    // 1-based, 0: unknown
  int column = 0;  // 1-based, 0: unknown
  bool plain = true;  // an unquoted scalar (its type came from its text)
};

struct SourceTree {
  json doc;
  std::map<std::string, SourcePos> values;  // path -> where its value starts
  std::map<std::string, SourcePos> keys;    // path -> where its key starts
  // This file, or a file merged into it (a base), declares a schema_version
  // newer than this bagua reads (refuse_newer_schema() said so).
  bool newer_schema = false;

  // Where to report a problem with the value at `path`: its value, else its
  // key, else the nearest ancestor that has a position.
  SourcePos locate(const std::string& path) const;
  // Where to report a problem with the key at `path` (an unknown key).
  SourcePos locate_key(const std::string& path) const;
  // True when the value at `path` was written by the user (not a default).
  bool written(const std::string& path) const { return values.count(path) != 0; }
  // Drops the positions of `path` and everything under it.
  void erase_positions(const std::string& path);
  // Copies the positions under `from_path` of `from` to `to_path` here.
  void copy_positions(const SourceTree& from, const std::string& from_path,
                      const std::string& to_path);
};

std::string child_path(const std::string& parent, const std::string& key);
std::string index_path(const std::string& parent, size_t index);
std::string parent_path(const std::string& path);

// Collects diagnostics; the loader sorts them.
struct Diagnostics {
  std::vector<Diagnostic> items;
  void add(const SourcePos& pos, const std::string& path, const std::string& message);
  bool empty() const { return items.empty(); }
};

// Text for messages: `string "abc"`, `integer 3`, `a list`, ...
std::string describe_found(const json& value);
// A JSON string literal of `s`.
std::string json_quote(const std::string& s);
// The closest of `candidates` to `word` when it is a plausible typo, else "".
using bagua::closest_match;
// "a, b, c"
std::string join(const std::vector<std::string>& items, const std::string& sep = ", ");

}  // namespace bagua::recipe
