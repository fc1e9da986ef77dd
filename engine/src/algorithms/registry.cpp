// make_algorithm() and make_algorithm_optimizer()
// (bagua/algorithms/registry.h): the factory of every algorithm of
// algorithm_list.h, in the catalog's order.
#include <bagua/algorithms/registry.h>
#include <bagua/communication.h>
#include <bagua/errors.h>

#include "algorithms/factories.h"

#include <vector>

namespace bagua {

namespace {
// factories()[i] builds algorithm_catalog()[i]: both expand algorithm_list.h.
const std::vector<algorithms::AlgorithmFactory>& factories() {
#define BAGUA_FACTORY(id) algorithms::id##_factory(),
  static const std::vector<algorithms::AlgorithmFactory> table = {BAGUA_ALGORITHMS(BAGUA_FACTORY)};
#undef BAGUA_FACTORY
  return table;
}

const algorithms::AlgorithmFactory* factory_of(const AlgorithmDescriptor* d) {
  if (d == nullptr) return nullptr;
  const auto& catalog = algorithm_catalog();
  return &factories().at(static_cast<size_t>(d - catalog.data()));
}
}  // namespace

int job_nodes(const AlgorithmBuildContext& context) {
  if (context.nnodes > 0) return context.nnodes;
  // One member per node holds each local rank: their count is the nodes'.
  return is_initialized() ? default_group()->inter_node_group()->size() : 1;
}

bool algorithm_implemented(const std::string& name) {
  const algorithms::AlgorithmFactory* f = factory_of(find_algorithm(name));
  return f != nullptr && f->build != nullptr;
}

AlgorithmPtr make_algorithm(const std::string& name, const nlohmann::json& kwargs,
                            const AlgorithmBuildContext& context) {
  const nlohmann::json complete = resolve_kwargs(name, kwargs, job_nodes(context));  // throws for an unknown name
  return factory_of(find_algorithm(name))->build(complete, context);
}

OptimizerPtr make_algorithm_optimizer(const std::string& type, std::vector<at::Tensor> params,
                                      const OptimizerSpec& spec) {
  const algorithms::AlgorithmFactory* f = factory_of(find_optimizer_owner(type));
  if (f == nullptr) return nullptr;
  if (!f->optimizer) {
    throw InvalidArgument("algorithm " + find_optimizer_owner(type)->name + " requires a " + type +
                          " optimizer but has no factory for one");
  }
  return f->optimizer(std::move(params), spec);
}

}  // namespace bagua
