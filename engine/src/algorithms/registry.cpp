#include <bagua/algorithms/registry.h>
#include <bagua/algorithms/async_model_average.h>
#include <bagua/algorithms/bytegrad.h>
#include <bagua/algorithms/decentralized.h>
#include <bagua/algorithms/gradient_allreduce.h>
#include <bagua/algorithms/q_adam.h>
#include <bagua/errors.h>

namespace bagua {

const std::vector<AlgorithmDescriptor>& algorithm_registry() {
  using json = nlohmann::json;
  static const std::vector<AlgorithmDescriptor> registry = {
      {"gradient_allreduce",
       "centralized, synchronous, full precision: allreduce of gradient buckets during backward",
       {{"hierarchical", false}, {"average", true}},
       {/*replicas_identical=*/true, /*needs_qadam_optimizer=*/false, /*supports_hierarchical=*/true},
       [](const json& kw, const AlgorithmBuildContext&) -> AlgorithmPtr {
         return std::make_shared<GradientAllReduce>(kw.at("hierarchical").get<bool>(), kw.at("average").get<bool>());
       }},
      {"bytegrad",
       "centralized, synchronous, 8-bit: compressed scatter-reduce and allgather of gradient buckets",
       {{"hierarchical", true}, {"average", true}},
       {true, false, true},
       [](const json& kw, const AlgorithmBuildContext&) -> AlgorithmPtr {
         return std::make_shared<ByteGrad>(kw.at("hierarchical").get<bool>(), kw.at("average").get<bool>());
       }},
      {"decentralized",
       "decentralized, synchronous, full precision: weights averaged with peers while forward and backward run",
       {{"hierarchical", true}, {"peer_selection_mode", "all"}, {"communication_interval", 1}},
       {false, false, true},
       [](const json& kw, const AlgorithmBuildContext&) -> AlgorithmPtr {
         return std::make_shared<Decentralized>(kw.at("hierarchical").get<bool>(),
                                                kw.at("peer_selection_mode").get<std::string>(),
                                                kw.at("communication_interval").get<int64_t>());
       }},
      {"low_precision_decentralized",
       "decentralized, synchronous, 8-bit: compressed weight differences exchanged around a ring",
       {{"hierarchical", true}, {"communication_interval", 1}},
       {false, false, true},
       [](const json& kw, const AlgorithmBuildContext&) -> AlgorithmPtr {
         return std::make_shared<LowPrecisionDecentralized>(kw.at("hierarchical").get<bool>(),
                                                            kw.at("communication_interval").get<int64_t>());
       }},
      {"qadam",
       "centralized, synchronous, 8-bit: Adam whose momentum is averaged compressed after a warm-up",
       {{"hierarchical", true}},
       {true, true, true},
       [](const json& kw, const AlgorithmBuildContext& context) -> AlgorithmPtr {
         std::shared_ptr<QAdamOptimizer> qadam;
         if (context.optimizers.size() == 1) qadam = std::dynamic_pointer_cast<QAdamOptimizer>(context.optimizers[0]);
         if (!qadam) {
           throw InvalidArgument("algorithm qadam drives exactly one optimizer, a QAdamOptimizer (the recipe's "
                                 "optimizers: [{type: qadam}]); got " + std::to_string(context.optimizers.size()) +
                                 " optimizer(s)" + (context.optimizers.size() == 1 ? " of another type" : ""));
         }
         return std::make_shared<QAdamAlgorithm>(qadam, kw.at("hierarchical").get<bool>());
       }},
      {"async",
       "asynchronous model averaging in the background, with abort and resume",
       {{"peer_selection_mode", "all"}, {"sync_interval_ms", 500}, {"warmup_steps", 0}},
       {/*replicas_identical=*/false, /*needs_qadam_optimizer=*/false, /*supports_hierarchical=*/false,
        /*synchronous=*/false},
       [](const json& kw, const AlgorithmBuildContext&) -> AlgorithmPtr {
         return std::make_shared<AsyncModelAverage>(kw.at("peer_selection_mode").get<std::string>(),
                                                    kw.at("sync_interval_ms").get<int64_t>(),
                                                    kw.at("warmup_steps").get<int64_t>());
       }},
  };
  return registry;
}

const AlgorithmDescriptor* find_algorithm(const std::string& name) {
  for (const auto& d : algorithm_registry()) {
    if (d.name == name) return &d;
  }
  return nullptr;
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

AlgorithmPtr make_algorithm(const std::string& name, const nlohmann::json& kwargs,
                            const AlgorithmBuildContext& context) {
  const AlgorithmDescriptor* spec = find_algorithm(name);
  if (spec == nullptr) {
    std::string known;
    for (const auto& s : algorithm_registry()) known += (known.empty() ? "" : ", ") + s.name;
    throw InvalidArgument("unknown algorithm '" + name + "' (known: " + known + ")");
  }
  if (!spec->implemented()) {
    std::string ready;
    for (const auto& s : algorithm_registry()) {
      if (s.implemented()) ready += (ready.empty() ? "" : ", ") + s.name;
    }
    throw InvalidArgument("algorithm '" + name + "' is not implemented in this version of bagua yet (implemented: " +
                          ready + ")");
  }
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
  return spec->make(complete, context);
}

}  // namespace bagua
