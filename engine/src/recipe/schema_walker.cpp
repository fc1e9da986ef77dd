// Checks a recipe against the JSON Schema and says what is wrong in words.
//
// valijson (schema_authority.cpp) gives the verdict, but its messages for
// if/then variants are of no use to a user ("failed to validate against
// child schema #3"). This walker interprets the subset of draft-07 that
// schemas/recipe.schema.json uses, so each failure is reported once, at the
// offending value, as "expected ..., found ...". For objects with variants
// (allOf of if/then on a discriminator such as algorithm.name) it first
// decides which variant applies, then checks the keys against that variant
// alone, so a key the variant does not accept is named with the keys it does
// accept. It also fills defaults, per variant.
#include "stages.h"

#include <algorithm>
#include <map>
#include <regex>

namespace bagua::recipe {
namespace {

bool type_is(const std::string& t, const json& v) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "array") return v.is_array();
  if (t == "object") return v.is_object();
  return false;
}

bool type_ok(const json& type, const json& v) {
  if (type.is_string()) return type_is(type.get<std::string>(), v);
  for (const auto& t : type)
    if (type_is(t.get<std::string>(), v)) return true;
  return false;
}

std::string number_text(const json& n) { return n.dump(); }

std::string plain_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

class Walker {
 public:
  Walker(const json& root, SourceTree* tree, Diagnostics* diags, SchemaFindings* findings)
      : root_(root), tree_(tree), diags_(diags), findings_(findings) {}

  const json& resolve(const json& s) const {
    const json* cur = &s;
    for (int depth = 0; depth < 32 && cur->is_object() && cur->contains("$ref"); ++depth) {
      std::string ref = (*cur)["$ref"].get<std::string>();
      cur = &root_.at(json::json_pointer(ref.substr(1)));
    }
    return *cur;
  }

  bool walk(json& v, const json& schema, const std::string& path, bool report) {
    const json& s = resolve(schema);
    if (!s.is_object()) return true;
    if (s.contains("anyOf")) return walk_any_of(v, s, path, report);
    if (auto t = s.find("type"); t != s.end() && !type_ok(*t, v))
      return fail(report, path, "expected " + describe(s) + ", found " + describe_found(v));
    if (auto c = s.find("const"); c != s.end() && *c != v)
      return fail(report, path, "expected " + describe(s) + ", found " + describe_found(v));
    if (auto e = s.find("enum"); e != s.end() &&
        std::find(e->begin(), e->end(), v) == e->end()) {
      std::string msg = "expected " + describe(s) + ", found " + describe_found(v);
      if (v.is_string()) {
        std::vector<std::string> names;
        for (const auto& x : *e)
          if (x.is_string()) names.push_back(x.get<std::string>());
        std::string near = closest_match(v.get<std::string>(), names);
        if (!near.empty()) msg += " (did you mean " + json_quote(near) + "?)";
      }
      return fail(report, path, msg);
    }
    if (v.is_number() && !number_ok(v, s))
      return fail(report, path, "expected " + describe(s) + ", found " + describe_found(v));
    if (v.is_string() && !string_ok(v.get<std::string>(), s))
      return fail(report, path, "expected " + describe(s) + ", found " + describe_found(v));
    bool ok = true;
    if (v.is_array()) ok = walk_array(v, s, path, report);
    if (v.is_object()) ok = walk_object(v, s, path, report);
    if (ok && report && findings_) {
      if (s.value("x-file", false) && v.is_string()) findings_->file_paths.push_back(path);
      if (s.value("x-dir", false) && v.is_string()) findings_->dir_paths.push_back(path);
      if (s.value("x-glob", false) && v.is_string()) findings_->glob_paths.push_back(path);
      if (s.value("x-size", false) && (v.is_string() || v.is_number())) findings_->size_paths.push_back(path);
    }
    return ok;
  }

  // A noun phrase for what `schema` accepts: "an integer >= 1", "one of a, b".
  std::string describe(const json& schema) const {
    const json& s = resolve(schema);
    if (auto x = s.find("x-expected"); x != s.end()) return x->get<std::string>();
    if (auto a = s.find("anyOf"); a != s.end()) {
      std::vector<std::string> parts;
      for (const auto& b : *a) {
        const json& r = resolve(b);
        if (r.contains("enum") && !r.contains("x-expected")) {
          // Inside "A or B", list an enum's values bare: "epoch, never or ...".
          std::vector<std::string> names;
          for (const auto& x : r["enum"]) names.push_back(plain_text(x));
          parts.push_back(join(names));
        } else {
          parts.push_back(describe(b));
        }
      }
      return join(parts, " or ");
    }
    if (auto c = s.find("const"); c != s.end()) return json_quote(plain_text(*c));
    if (auto e = s.find("enum"); e != s.end()) {
      std::vector<std::string> names;
      for (const auto& x : *e) names.push_back(plain_text(x));
      return names.size() == 1 ? names[0] : "one of " + join(names);
    }
    std::vector<std::string> types;
    if (auto t = s.find("type"); t != s.end()) {
      if (t->is_string()) types.push_back(t->get<std::string>());
      else for (const auto& x : *t) types.push_back(x.get<std::string>());
    }
    std::vector<std::string> parts;
    for (const auto& t : types) parts.push_back(type_noun(t, s));
    return parts.empty() ? "a valid value" : join(parts, " or ");
  }

 private:
  std::string type_noun(const std::string& t, const json& s) const {
    if (t == "integer" || t == "number") {
      std::string noun = t == "integer" ? "an integer" : "a number";
      std::vector<std::string> bounds;
      if (s.contains("minimum") && s.contains("maximum"))
        return noun + " from " + number_text(s["minimum"]) + " to " + number_text(s["maximum"]);
      if (s.contains("minimum")) bounds.push_back(">= " + number_text(s["minimum"]));
      if (s.contains("exclusiveMinimum")) bounds.push_back("> " + number_text(s["exclusiveMinimum"]));
      if (s.contains("maximum")) bounds.push_back("<= " + number_text(s["maximum"]));
      if (s.contains("exclusiveMaximum")) bounds.push_back("< " + number_text(s["exclusiveMaximum"]));
      return bounds.empty() ? noun : noun + " " + join(bounds, " and ");
    }
    if (t == "string") {
      if (s.value("maxLength", 0) == 1 && s.value("minLength", 0) == 1) return "a single character";
      if (s.value("minLength", 0) >= 1) return "a non-empty string";
      return "a string";
    }
    if (t == "boolean") return "true or false";
    if (t == "null") return "null";
    if (t == "object") return "a mapping";
    if (t == "array") {
      std::string noun = "a list";
      if (s.contains("minItems") && s.contains("maxItems") && s["minItems"] == s["maxItems"])
        noun += " of " + s["minItems"].dump() + " items";
      else if (s.value("minItems", 0) == 1)
        noun = "a non-empty list";
      if (s.contains("items")) noun += " (each " + describe(s["items"]) + ")";
      return noun;
    }
    return t;
  }

  bool fail(bool report, const std::string& path, const std::string& message) {
    if (report && diags_) diags_->add(tree_->locate(path), path, message);
    return false;
  }

  bool fail_key(bool report, const std::string& path, const std::string& message) {
    if (report && diags_) diags_->add(tree_->locate_key(path), path, message);
    return false;
  }

  bool quiet_ok(const json& v, const json& schema) {
    json copy = v;
    return walk(copy, schema, "", false);
  }

  bool plausible(const json& schema, const json& v) const {
    const json& s = resolve(schema);
    if (auto t = s.find("type"); t != s.end()) return type_ok(*t, v);
    if (auto e = s.find("enum"); e != s.end()) {
      for (const auto& x : *e)
        if (x.type() == v.type() || (x.is_number() && v.is_number())) return true;
      return false;
    }
    if (auto c = s.find("const"); c != s.end()) return c->type() == v.type();
    return true;
  }

  bool walk_any_of(json& v, const json& s, const std::string& path, bool report) {
    std::vector<const json*> candidates;
    for (const auto& branch : s["anyOf"]) {
      if (quiet_ok(v, branch)) return walk(v, branch, path, report);
      if (plausible(branch, v)) candidates.push_back(&branch);
    }
    // A mapping or list of the one plausible kind: its own errors say more.
    if (candidates.size() == 1 && (v.is_object() || v.is_array()))
      return walk(v, *candidates[0], path, report);
    return fail(report, path, "expected " + describe(s) + ", found " + describe_found(v));
  }

  bool number_ok(const json& v, const json& s) const {
    double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
    return true;
  }

  bool string_ok(const std::string& x, const json& s) {
    if (s.contains("minLength") && x.size() < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && x.size() > s["maxLength"].get<size_t>()) return false;
    if (auto p = s.find("pattern"); p != s.end()) {
      auto& re = regex_cache_[p->get<std::string>()];
      if (!re) re = std::make_unique<std::regex>(p->get<std::string>(), std::regex::ECMAScript);
      if (!std::regex_search(x, *re)) return false;
    }
    return true;
  }

  bool walk_array(json& v, const json& s, const std::string& path, bool report) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>())
      return fail(report, path, "expected " + describe(s) + ", found " +
                  (v.empty() ? std::string("an empty list") : "a list of " + std::to_string(v.size())));
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>())
      return fail(report, path, "expected " + describe(s) + ", found a list of " + std::to_string(v.size()));
    bool ok = true;
    if (auto items = s.find("items"); items != s.end())
      for (size_t i = 0; i < v.size(); ++i) ok = walk(v[i], *items, index_path(path, i), report) && ok;
    return ok;
  }

  void fill_defaults(json& v, const json& properties) const {
    for (auto it = properties.begin(); it != properties.end(); ++it) {
      if (v.contains(it.key())) continue;
      if (it->contains("default")) {
        v[it.key()] = (*it)["default"];
      } else if (const json& r = resolve(*it); r.contains("default")) {
        v[it.key()] = r["default"];
      }
    }
  }

  struct Variant {
    const json* schema;
    std::string key;    // the discriminator
    json value;         // its value for this variant
  };

  static json variant_value(const json& if_schema, std::string& key) {
    if (!if_schema.contains("required") || if_schema["required"].empty()) return nullptr;
    key = if_schema["required"][0].get<std::string>();
    const json& p = if_schema["properties"][key];
    return p.contains("const") ? p["const"] : json(nullptr);
  }

  bool walk_object(json& v, const json& s, const std::string& path, bool report) {
    static const json kEmpty = json::object();
    const json& base_props = s.contains("properties") ? s["properties"] : kEmpty;
    fill_defaults(v, base_props);

    std::vector<Variant> matched, others;
    if (auto all = s.find("allOf"); all != s.end()) {
      for (const auto& entry : *all) {
        if (!entry.contains("if")) {
          matched.push_back({&resolve(entry), "", nullptr});
          continue;
        }
        std::string key;
        json value = variant_value(resolve(entry["if"]), key);
        Variant var{&resolve(entry["then"]), key, value};
        (quiet_ok(v, entry["if"]) ? matched : others).push_back(var);
      }
    }

    std::map<std::string, const json*> props;
    for (auto it = base_props.begin(); it != base_props.end(); ++it) props[it.key()] = &*it;
    std::vector<std::string> required = s.value("required", std::vector<std::string>{});
    bool closed = s.contains("additionalProperties") && s["additionalProperties"] == false;
    const Variant* chosen = nullptr;
    for (const auto& m : matched) {
      const json& ms = *m.schema;
      if (!m.key.empty()) chosen = &m;
      if (ms.contains("properties")) {
        fill_defaults(v, ms["properties"]);
        for (auto it = ms["properties"].begin(); it != ms["properties"].end(); ++it)
          props.emplace(it.key(), &*it);
      }
      for (const auto& r : ms.value("required", std::vector<std::string>{})) required.push_back(r);
      if (ms.contains("additionalProperties") && ms["additionalProperties"] == false) closed = true;
    }

    bool ok = true;
    std::string noun = s.value("x-variant-noun", std::string());
    std::string variant_label = chosen && !noun.empty()
        ? noun + " " + json_quote(plain_text(chosen->value)) : std::string();
    for (const auto& r : required) {
      if (v.contains(r)) continue;
      std::string child = child_path(path, r);
      std::string msg = "missing required key " + json_quote(r);
      if (!variant_label.empty() && !base_props.contains(r)) msg += " (required by " + variant_label + ")";
      if (auto p = props.find(r); p != props.end() && p->second->contains("description"))
        msg += ": " + (*p->second)["description"].get<std::string>();
      if (report && diags_) diags_->add(path.empty() ? tree_->locate("") : tree_->locate_key(path), child, msg);
      ok = false;
    }

    for (auto it = v.begin(); it != v.end(); ++it) {
      std::string child = child_path(path, it.key());
      if (auto p = props.find(it.key()); p != props.end()) {
        ok = walk(*it, *p->second, child, report) && ok;
      } else if (closed) {
        ok = fail_key(report, child, unknown_key_message(it.key(), props, chosen, variant_label, others));
      }
    }
    return ok;
  }

  std::string unknown_key_message(const std::string& key, const std::map<std::string, const json*>& props,
                                  const Variant* chosen, const std::string& variant_label,
                                  const std::vector<Variant>& others) const {
    std::vector<std::string> names;
    if (chosen && props.count(chosen->key)) names.push_back(chosen->key);
    for (const auto& [name, schema] : props)
      if (!chosen || name != chosen->key) names.push_back(name);
    std::string near = closest_match(key, names);
    if (variant_label.empty()) {
      if (!near.empty()) return "unknown key (did you mean " + json_quote(near) + "?)";
      return "unknown key (expected one of: " + join(names) + ")";
    }
    std::string msg = "not accepted by " + variant_label + " (accepted keys: " + join(names) + ")";
    if (!near.empty()) msg += "; did you mean " + json_quote(near) + "?";
    std::vector<std::string> accepting;
    for (const auto& o : others)
      if (o.schema->contains("properties") && (*o.schema)["properties"].contains(key))
        accepting.push_back(plain_text(o.value));
    if (!accepting.empty()) msg += "; " + key + " is accepted by " + join(accepting, ", ");
    if (const json& hints = chosen->schema->value("x-hints", json::object()); hints.contains(key))
      msg += "; " + hints[key].get<std::string>();
    return msg;
  }

  const json& root_;
  SourceTree* tree_;
  Diagnostics* diags_;
  SchemaFindings* findings_;
  std::map<std::string, std::unique_ptr<std::regex>> regex_cache_;
};

}  // namespace

SchemaFindings check_against_schema(SourceTree& tree, const json& schema, Diagnostics& diags) {
  SchemaFindings findings;
  Walker walker(schema, &tree, &diags, &findings);
  walker.walk(tree.doc, schema, "", true);
  return findings;
}

bool schema_knows_path(const json& schema, const KeyPath& path,
                       std::string& unknown, std::vector<std::string>& known_here) {
  Walker walker(schema, nullptr, nullptr, nullptr);
  const json* s = &schema;
  for (const KeyPath::Step& step : path.steps()) {
    // Every schema this node may be checked against: itself, anyOf branches, variants.
    std::vector<const json*> views{&walker.resolve(*s)};
    for (size_t i = 0; i < views.size(); ++i) {
      const json& view = *views[i];
      for (const char* k : {"anyOf", "allOf"})
        if (view.contains(k))
          for (const auto& b : view[k]) views.push_back(&walker.resolve(b.contains("then") ? b["then"] : b));
    }
    const bool is_index = step.is_index();
    const json* next = nullptr;
    known_here.clear();
    for (const json* view : views) {
      if (is_index && view->contains("items")) next = &(*view)["items"];
      if (!is_index && view->contains("properties")) {
        for (auto it = (*view)["properties"].begin(); it != (*view)["properties"].end(); ++it) {
          if (std::find(known_here.begin(), known_here.end(), it.key()) == known_here.end())
            known_here.push_back(it.key());
          if (it.key() == step.key && !next) next = &*it;
        }
      }
    }
    if (!next) {
      unknown = is_index ? std::to_string(step.index) : step.key;
      return false;
    }
    s = next;
  }
  return true;
}

}  // namespace bagua::recipe
