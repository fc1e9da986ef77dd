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
constexpr const char* kHierarchical = "hierarchical";

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
      if (!kwarg_fits(key, def, value)) {
        const std::string expected = key == kHierarchical ? "a boolean or \"auto\"" : json_type(def);
        throw InvalidArgument("algorithm " + name + ": '" + key + "' must be " + expected + ", got " +
                              (key == kHierarchical && value.is_string() ? "\"" + value.get<std::string>() + "\""
                                                                          : json_type(value)));
      }
      complete[key] = value;
    }
  }
  return complete;
}

bool kwarg_fits(const std::string& key, const nlohmann::json& def, const nlohmann::json& value) {
  if (key == kHierarchical) return value.is_boolean() || value == "auto";
  return (def.is_boolean() && value.is_boolean()) || (def.is_string() && value.is_string()) ||
         (def.is_number_integer() && value.is_number_integer()) || (def.is_number_float() && value.is_number());
}

bool hierarchical_for(const nlohmann::json& value, int nnodes) {
  return value.is_boolean() ? value.get<bool>() : nnodes > 1;
}

nlohmann::json resolve_kwargs(const std::string& name, const nlohmann::json& kwargs, int nnodes) {
  nlohmann::json complete = complete_kwargs(name, kwargs);
  if (complete.contains(kHierarchical)) complete[kHierarchical] = hierarchical_for(complete[kHierarchical], nnodes);
  return complete;
}

std::string hierarchical_choice(const std::string& name, const nlohmann::json& kwargs, int nnodes) {
  const AlgorithmDescriptor* spec = find_algorithm(name);
  if (spec == nullptr || !spec->defaults.contains(kHierarchical)) return "";
  nlohmann::json value = spec->defaults[kHierarchical];
  if (kwargs.is_object() && kwargs.contains(kHierarchical)) value = kwargs[kHierarchical];
  if (value.is_boolean()) return std::string("hierarchical: ") + (value.get<bool>() ? "true" : "false");
  if (nnodes <= 0) return "hierarchical: auto (hierarchical in the rounds that span nodes)";
  return nnodes > 1 ? "hierarchical: auto (hierarchical across " + std::to_string(nnodes) + " nodes)"
                    : std::string("hierarchical: auto (flat on one node)");
}

}  // namespace bagua
