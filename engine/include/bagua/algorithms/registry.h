// Building an algorithm from its name and keyword arguments: the LibTorch
// side of the catalog (bagua/algorithms/catalog.h, included here, holds each
// algorithm's descriptor: defaults, traits, checks and traffic model).
// `bagua run` and `bagua bench` build the recipe's algorithm through
// make_algorithm(), and the optimizer an algorithm requires
// (AlgorithmTraits::required_optimizer) through make_algorithm_optimizer();
// a test keeps every catalog entry buildable.
#pragma once

#include <bagua/algorithms/algorithm.h>
#include <bagua/algorithms/catalog.h>
#include <bagua/recipe_spec.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace bagua {

// What a factory may need beyond the keyword arguments.
struct AlgorithmBuildContext {
  std::vector<OptimizerPtr> optimizers;  // the run's optimizers, in recipe order
  // The nodes the job spans, which decide hierarchical: auto
  // (resolve_kwargs()); 0: those of the default group (1 without one).
  int nnodes = 0;
};

// The nodes `context` says the job spans (AlgorithmBuildContext::nnodes).
int job_nodes(const AlgorithmBuildContext& context);

// True when this build can make the algorithm called `name`.
bool algorithm_implemented(const std::string& name);

// Builds an algorithm from its name and keyword arguments (missing ones take
// their defaults and "auto" is decided: resolve_kwargs()). Throws InvalidArgument for an unknown
// name (listing the known ones), an unknown keyword argument (naming the
// accepted ones), a value whose JSON type differs from the default's, or a
// context the algorithm cannot use (one with a required optimizer, given
// optimizers other than exactly one of that type).
AlgorithmPtr make_algorithm(const std::string& name, const nlohmann::json& kwargs = nlohmann::json::object(),
                            const AlgorithmBuildContext& context = {});

// The optimizer of recipe type `type` (e.g. "qadam") over `params`, with
// `spec`'s hyperparameters, when an algorithm requires that type
// (find_optimizer_owner()) and so builds it; nullptr for a type no
// algorithm owns (LibTorch's optimizers: the caller builds those).
OptimizerPtr make_algorithm_optimizer(const std::string& type, std::vector<at::Tensor> params,
                                      const OptimizerSpec& spec);

}  // namespace bagua
