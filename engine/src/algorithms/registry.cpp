#include <bagua/algorithms/registry.h>
#include <bagua/algorithms/gradient_allreduce.h>
#include <bagua/errors.h>

namespace bagua {

const std::vector<AlgorithmEntry>& algorithm_registry() {
  static const std::vector<AlgorithmEntry> registry = {
      {"gradient_allreduce",
       "centralized, synchronous, full precision: allreduce of gradient buckets during backward",
       {{"hierarchical", false}, {"average", true}},
       [](const nlohmann::json& kw) -> AlgorithmPtr {
         return std::make_shared<GradientAllReduce>(kw.at("hierarchical").get<bool>(),
                                                    kw.at("average").get<bool>());
       }},
  };
  return registry;
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

AlgorithmPtr make_algorithm(const std::string& name, const nlohmann::json& kwargs) {
  const auto& registry = algorithm_registry();
  const AlgorithmEntry* spec = nullptr;
  std::string known;
  for (const auto& s : registry) {
    if (s.name == name) spec = &s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  if (spec == nullptr) throw InvalidArgument("unknown algorithm '" + name + "' (known: " + known + ")");
  if (!kwargs.is_null() && !kwargs.is_object()) {
    throw InvalidArgument("algorithm " + name + ": keyword arguments must be a mapping");
  }
  nlohmann::json complete = spec->defaults;
  std::string accepted;
  for (const auto& [key, value] : spec->defaults.items()) accepted += (accepted.empty() ? "" : ", ") + key;
  if (kwargs.is_object()) {
    for (const auto& [key, value] : kwargs.items()) {
      if (!spec->defaults.contains(key)) {
        throw InvalidArgument("algorithm " + name + " does not accept '" + key + "' (it accepts: " +
                              accepted + ")");
      }
      const auto& def = spec->defaults.at(key);
      bool same_kind = (def.is_boolean() && value.is_boolean()) || (def.is_string() && value.is_string()) ||
                       (def.is_number_integer() && value.is_number_integer()) ||
                       (def.is_number_float() && value.is_number());
      if (!same_kind) {
        throw InvalidArgument("algorithm " + name + ": '" + key + "' must be " + json_type(def) + ", got " +
                              json_type(value));
      }
      complete[key] = value;
    }
  }
  return spec->make(complete);
}

}  // namespace bagua
