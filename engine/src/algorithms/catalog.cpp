// algorithm_catalog() (bagua/algorithms/catalog.h): the descriptor of every
// algorithm of algorithm_list.h, and what is asked of it by name.
#include <bagua/algorithms/catalog.h>
#include <bagua/errors.h>

#include "algorithms/descriptors.h"

namespace bagua {

const std::vector<AlgorithmDescriptor>& algorithm_catalog() {
#define BAGUA_DESCRIPTOR(id) algorithms::id##_descriptor(),
  static const std::vector<AlgorithmDescriptor> catalog = {BAGUA_ALGORITHMS(BAGUA_DESCRIPTOR)};
#undef BAGUA_DESCRIPTOR
  return catalog;
}

const AlgorithmDescriptor* find_algorithm(const std::string& name) {
  for (const auto& d : algorithm_catalog()) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

const AlgorithmDescriptor* find_optimizer_owner(const std::string& optimizer_type) {
  if (optimizer_type.empty()) return nullptr;
  for (const auto& d : algorithm_catalog()) {
    if (d.traits.required_optimizer == optimizer_type) return &d;
  }
  return nullptr;
}

std::string algorithm_names() {
  std::string known;
  for (const auto& d : algorithm_catalog()) known += (known.empty() ? "" : ", ") + d.name;
  return known;
}

namespace {
const char* json_type(const nlohmann::json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "a list";
  if (v.is_object()) return "a mapping";
  return "null";
}
}  // namespace

nlohmann::json complete_kwargs(const std::string& name, const nlohmann::json& kwargs) {
  const AlgorithmDescriptor* spec = find_algorithm(name);
  if (spec == nullptr) throw InvalidArgument("unknown algorithm '" + name + "' (known: " + algorithm_names() + ")");
  if (!kwargs.is_null() && !kwargs.is_object()) {
    throw InvalidArgument("algorithm " + name + ": keyword arguments must be a mapping");
  }
  nlohmann::json complete = spec->defaults;
  std::string accepted;
  for (const auto& [key, value] : spec->defaults.items()) accepted += (accepted.empty() ? "" : ", ") + key;
  if (kwargs.is_object()) {
    for (const auto& [key, value] : kwargs.items()) {
      if (!spec->defaults.contains(key)) {
        throw InvalidArgument("algorithm " + name + " does not accept '" + key + "' (it accepts: " + accepted + ")");
      }
      const auto& def = spec->defaults.at(key);
      const bool same_kind = (def.is_boolean() && value.is_boolean()) || (def.is_string() && value.is_string()) ||
                             (def.is_number_integer() && value.is_number_integer()) ||
                             (def.is_number_float() && value.is_number());
      if (!same_kind) {
        throw InvalidArgument("algorithm " + name + ": '" + key + "' must be " + json_type(def) + ", got " +
                              json_type(value));
      }
      complete[key] = value;
    }
  }
  return complete;
}

}  // namespace bagua
