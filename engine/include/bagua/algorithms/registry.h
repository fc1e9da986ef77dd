// The one list of algorithms: name -> keyword arguments with defaults ->
// Algorithm. The CLI, the recipe checks and `bagua bench` all go through it.
#pragma once

#include <bagua/algorithms/algorithm.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace bagua {

struct AlgorithmEntry {
  std::string name;         // "gradient_allreduce"
  std::string description;  // one line
  nlohmann::json defaults;  // every accepted keyword argument with its default
  std::function<AlgorithmPtr(const nlohmann::json& kwargs)> make;  // kwargs complete and checked
};

// Every algorithm, in a stable order.
const std::vector<AlgorithmEntry>& algorithm_registry();

// Builds an algorithm from its name and keyword arguments (missing ones take
// their defaults). Throws InvalidArgument for an unknown name (listing the
// known ones), an unknown keyword argument (naming the accepted ones), or a
// value whose JSON type differs from the default's.
AlgorithmPtr make_algorithm(const std::string& name, const nlohmann::json& kwargs = nlohmann::json::object());

}  // namespace bagua
