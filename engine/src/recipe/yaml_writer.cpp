// JSON tree -> YAML text that reads back to the same tree.
//
// Sections come in the order users write them, discriminators (name, type,
// format) first inside a mapping; lists of scalars are written inline.
// Strings that YAML would read as something else ("10", "true") are quoted,
// numbers are written in their shortest exact form.
#include "stages.h"

#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <cstdlib>

namespace bagua::recipe {
namespace {

std::string shortest(double x) {
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  std::string s = buf;
  // Keep it a float when read back: "1" -> "1.0".
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::vector<std::string> ordered_keys(const json& object, bool top) {
  static const std::vector<std::string> kTop = {"name", "model", "data", "optimizers", "scheduler",
                                                "algorithm", "distributed", "train", "checkpoint", "output"};
  static const std::vector<std::string> kFirst = {"name", "type", "format"};
  std::vector<std::string> keys;
  for (const auto& k : top ? kTop : kFirst)
    if (object.contains(k)) keys.push_back(k);
  for (auto it = object.begin(); it != object.end(); ++it)
    if (std::find(keys.begin(), keys.end(), it.key()) == keys.end()) keys.push_back(it.key());
  return keys;
}

bool scalar_list(const json& v) {
  return std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_primitive(); });
}

void emit(YAML::Emitter& out, const json& v, bool top = false) {
  switch (v.type()) {
    case json::value_t::object:
      out << YAML::BeginMap;
      for (const auto& k : ordered_keys(v, top)) {
        out << YAML::Key << k << YAML::Value;
        emit(out, v[k]);
      }
      out << YAML::EndMap;
      break;
    case json::value_t::array:
      if (scalar_list(v)) out << YAML::Flow;
      out << YAML::BeginSeq;
      for (const auto& x : v) emit(out, x);
      out << YAML::EndSeq;
      break;
    case json::value_t::string: {
      // A resolved recipe is a recipe: a literal $ must not expand again.
      std::string s;
      for (char c : v.get<std::string>()) s += c == '$' ? std::string("$$") : std::string(1, c);
      if (!resolve_plain_scalar(s).is_string())
        out << YAML::DoubleQuoted << s;
      else
        out << s;
      break;
    }
    case json::value_t::number_float: out << shortest(v.get<double>()); break;
    case json::value_t::null: out << YAML::Null; break;
    default: out << v.dump(); break;  // integers, booleans
  }
}

}  // namespace

std::string to_yaml(const json& doc) {
  YAML::Emitter out;
  out.SetIndent(2);
  emit(out, doc, true);
  return std::string(out.c_str()) + "\n";
}

}  // namespace bagua::recipe
