// Each algorithm's factory: its object built from complete, checked keyword
// arguments (complete_kwargs(), bagua/algorithms/catalog.h). Defined at the
// end of each algorithm's source; listed in registry.cpp.
#pragma once

#include <bagua/algorithms/registry.h>

namespace bagua {

AlgorithmPtr make_gradient_allreduce(const nlohmann::json& kwargs, const AlgorithmBuildContext& context);
AlgorithmPtr make_bytegrad(const nlohmann::json& kwargs, const AlgorithmBuildContext& context);
AlgorithmPtr make_decentralized(const nlohmann::json& kwargs, const AlgorithmBuildContext& context);
AlgorithmPtr make_low_precision_decentralized(const nlohmann::json& kwargs, const AlgorithmBuildContext& context);
AlgorithmPtr make_qadam(const nlohmann::json& kwargs, const AlgorithmBuildContext& context);
AlgorithmPtr make_async(const nlohmann::json& kwargs, const AlgorithmBuildContext& context);

}  // namespace bagua
