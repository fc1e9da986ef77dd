// Test tables over every algorithm: the names come from the catalog
// (bagua/algorithms/catalog.h), so a new algorithm gets every cell without
// a test edit, and what a cell needs to know of one (its keyword arguments,
// the optimizer it requires, its traits) comes from its descriptor.
#pragma once

#include <bagua/algorithms/catalog.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace bagua::testing {

// Every algorithm's name, in catalog order: ::testing::ValuesIn(every_algorithm()).
inline std::vector<std::string> every_algorithm() {
  std::vector<std::string> names;
  for (const auto& d : algorithm_catalog()) names.push_back(d.name);
  return names;
}

// The descriptor of `algorithm`, which must exist.
inline const AlgorithmDescriptor& descriptor_of(const std::string& algorithm) {
  const AlgorithmDescriptor* d = find_algorithm(algorithm);
  if (d == nullptr) throw std::runtime_error("no algorithm " + algorithm + " in the catalog");
  return *d;
}

// The `bagua run` arguments (" --set ...") that run `algorithm` in a test on
// one machine (where `hierarchical: auto`, the default, is flat): each of
// `kwargs` that the algorithm accepts (e.g.
// {{"sync_interval_ms", 5}} for those that have it), and, for an algorithm
// with a required optimizer, that optimizer with `optimizer_settings`
// (e.g. "lr: 0.001, warmup_steps: 5").
inline std::string one_machine_sets(const std::string& algorithm, const nlohmann::json& kwargs,
                                    const std::string& optimizer_settings) {
  const AlgorithmDescriptor& d = descriptor_of(algorithm);
  std::string sets = " --set 'algorithm={name: " + algorithm;
  for (const auto& [key, value] : kwargs.items()) {
    if (d.defaults.contains(key)) sets += ", " + key + ": " + value.dump();
  }
  sets += "}'";
  if (!d.traits.required_optimizer.empty()) {
    sets += " --set 'optimizers=[{type: " + d.traits.required_optimizer + ", " + optimizer_settings + "}]'";
  }
  return sets;
}

}  // namespace bagua::testing
