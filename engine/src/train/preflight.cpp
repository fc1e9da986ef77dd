#include <bagua/preflight.h>

#include <bagua/algorithms/catalog.h>
#include <bagua/algorithms/registry.h>
#include <bagua/data.h>
#include <bagua/errors.h>

#include "train/worker_environment.h"

#include <torch/cuda.h>

namespace bagua {

void check_supported(const Recipe& recipe) {
  auto unsupported = [](const std::string& key, const std::string& what) {
    throw Error(key + ": " + what + " is not implemented in this version of bagua yet", true);
  };
  const AlgorithmDescriptor* algorithm = find_algorithm(recipe.algorithm.name);
  if (algorithm == nullptr || !algorithm_implemented(algorithm->name)) {
    unsupported("algorithm.name", "algorithm '" + recipe.algorithm.name + "'");
  }
  if (recipe.train.device == Device::kCuda && torch::cuda::device_count() == 0) {
    train::choose_device(Device::kCuda, 0);  // throws the no-GPU error
  }
}

void check_data(const Recipe& recipe, SharedData* share) {
  check_dataset(recipe.data.train, target_kind_for(recipe.model.loss), load_options_for(recipe.data), share);
  if (recipe.data.eval) check_dataset(*recipe.data.eval, target_kind_for(recipe.model.loss), {}, share);
}

}  // namespace bagua
