// The one description of every algorithm: its name, keyword arguments with
// defaults, traits, and factory. Recipe validation, `bagua run` (what it
// can run, the optimizer it needs, the end-of-run weight check) and `bagua
// bench` read it instead of keeping lists of their own; a test keeps the
// recipe schema's defaults equal to these.
#pragma once

#include <bagua/algorithms/algorithm.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace bagua {

struct AlgorithmTraits {
  // Every rank holds the same weights after every step (centralized,
  // synchronous algorithms); the others keep per-rank weights.
  bool replicas_identical = true;
  // Needs exactly one optimizer, of type qadam (QAdamOptimizer).
  bool needs_qadam_optimizer = false;
  // Has a `hierarchical` keyword argument that takes effect.
  bool supports_hierarchical = false;
  // Every rank takes the same steps in lockstep (false for async: ranks run
  // at their own pace, and the trainer must not wait for them every step).
  bool synchronous = true;
};

// What a factory may need beyond the keyword arguments.
struct AlgorithmBuildContext {
  std::vector<OptimizerPtr> optimizers;  // the run's optimizers, in recipe order
};

struct AlgorithmDescriptor {
  std::string name;         // "gradient_allreduce"
  std::string description;  // one line
  nlohmann::json defaults;  // every accepted keyword argument with its default
  AlgorithmTraits traits;
  // kwargs complete and checked. Null: described but not implemented yet.
  std::function<AlgorithmPtr(const nlohmann::json& kwargs, const AlgorithmBuildContext& context)> make;

  bool implemented() const { return static_cast<bool>(make); }
};

// Every algorithm of Bagua's six, in a stable order.
const std::vector<AlgorithmDescriptor>& algorithm_registry();

// The descriptor called `name`, or nullptr.
const AlgorithmDescriptor* find_algorithm(const std::string& name);

// Builds an algorithm from its name and keyword arguments (missing ones take
// their defaults). Throws InvalidArgument for an unknown or unimplemented
// name (listing the known ones), an unknown keyword argument (naming the
// accepted ones), a value whose JSON type differs from the default's, or a
// context the algorithm cannot use (qadam without a QAdamOptimizer).
AlgorithmPtr make_algorithm(const std::string& name, const nlohmann::json& kwargs = nlohmann::json::object(),
                            const AlgorithmBuildContext& context = {});

}  // namespace bagua
