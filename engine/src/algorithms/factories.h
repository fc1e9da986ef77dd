// Each algorithm's factory, defined at the end of its LibTorch source, for
// every algorithm of algorithm_list.h; registry.cpp lists them.
#pragma once

#include <bagua/algorithms/registry.h>

#include "algorithms/algorithm_list.h"

#include <functional>
#include <utility>
#include <vector>

namespace bagua::algorithms {

struct AlgorithmFactory {
  using Build = std::function<AlgorithmPtr(const nlohmann::json& kwargs, const AlgorithmBuildContext& context)>;
  using BuildOptimizer = std::function<OptimizerPtr(std::vector<at::Tensor> params, const OptimizerSpec& spec)>;
  AlgorithmFactory(Build b, BuildOptimizer o = nullptr) : build(std::move(b)), optimizer(std::move(o)) {}  // NOLINT

  // The algorithm from complete, checked keyword arguments
  // (complete_kwargs(), bagua/algorithms/catalog.h). Required.
  Build build;
  // The optimizer its descriptor's traits.required_optimizer names, made
  // from the recipe's spec of it; empty for an algorithm that requires none.
  BuildOptimizer optimizer;
};

#define BAGUA_DECLARE_FACTORY(id) AlgorithmFactory id##_factory();
BAGUA_ALGORITHMS(BAGUA_DECLARE_FACTORY)
#undef BAGUA_DECLARE_FACTORY

}  // namespace bagua::algorithms
