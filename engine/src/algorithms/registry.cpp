// make_algorithm() (bagua/algorithms/registry.h): one factory per algorithm
// of the catalog; adding an algorithm adds one line here.
#include <bagua/algorithms/registry.h>
#include <bagua/errors.h>

#include "algorithms/factories.h"

#include <functional>
#include <map>

namespace bagua {

namespace {
using Factory = std::function<AlgorithmPtr(const nlohmann::json&, const AlgorithmBuildContext&)>;

const std::map<std::string, Factory>& factories() {
  static const std::map<std::string, Factory> table = {
      {"gradient_allreduce", make_gradient_allreduce},
      {"bytegrad", make_bytegrad},
      {"decentralized", make_decentralized},
      {"low_precision_decentralized", make_low_precision_decentralized},
      {"qadam", make_qadam},
      {"async", make_async},
  };
  return table;
}
}  // namespace

bool algorithm_implemented(const std::string& name) {
  return find_algorithm(name) != nullptr && factories().count(name) > 0;
}

AlgorithmPtr make_algorithm(const std::string& name, const nlohmann::json& kwargs,
                            const AlgorithmBuildContext& context) {
  if (find_algorithm(name) != nullptr && !algorithm_implemented(name)) {
    std::string ready;
    for (const auto& d : algorithm_catalog()) {
      if (algorithm_implemented(d.name)) ready += (ready.empty() ? "" : ", ") + d.name;
    }
    throw InvalidArgument("algorithm '" + name + "' is not implemented in this version of bagua yet (implemented: " +
                          ready + ")");
  }
  const nlohmann::json complete = complete_kwargs(name, kwargs);  // throws for an unknown name
  return factories().at(name)(complete, context);
}

}  // namespace bagua
