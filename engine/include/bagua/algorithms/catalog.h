// What bagua knows about each of its algorithms, without LibTorch: name,
// one-line description, keyword arguments with their defaults, traits, the
// checks of a recipe it cannot run, and the traffic model `bagua plan`
// uses. One AlgorithmDescriptor per algorithm, defined next to the
// algorithm's own source (engine/src/algorithms/NAME_descriptor.cpp); the
// algorithm's one line in engine/src/algorithms/algorithm_list.h puts it in
// algorithm_catalog(). Recipe validation, the trainer, the
// planner and the bench ask the descriptor; none of them names an
// algorithm. Building one is LibTorch's side: make_algorithm()
// (bagua/algorithms/registry.h, in libbagua_core).
#pragma once

#include <bagua/algorithms/traffic.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace bagua {

struct AlgorithmTraits {
  // Every rank holds the same weights after every step (centralized,
  // synchronous algorithms); the others keep per-rank weights, so
  // checkpoints keep each rank's and evaluations use their average.
  bool replicas_identical = true;
  // The optimizer this algorithm drives, by its recipe type (e.g. "qadam"),
  // or empty: any. When set, the algorithm's recipe has exactly one
  // optimizer, of this type and not fused, no other algorithm takes one of
  // this type, and make_algorithm_optimizer() (bagua/algorithms/registry.h)
  // builds it; AlgorithmDescriptor::optimizer says the rest of it.
  std::string required_optimizer;
  // Has a `hierarchical` keyword argument that takes effect.
  bool supports_hierarchical = false;
  // Every rank takes the same steps in lockstep (false for async: ranks run
  // at their own pace, and the trainer must not wait for them every step).
  bool synchronous = true;
  // Per-bucket state lives across steps (copies of the peers' weights, a
  // background averaging loop): buckets cannot be rebuilt mid-training, so
  // bucket_size: auto is refused (AlgorithmImpl::keeps_bucket_state()).
  bool keeps_bucket_state = false;
};

// What the rest of bagua knows of the optimizer an algorithm requires
// (AlgorithmTraits::required_optimizer), so that none of it names either.
struct RequiredOptimizer {
  // Why no other algorithm can take it, ending the recipe check's "the T
  // optimizer only works with algorithm.name: A (found algorithm B), ...".
  std::string only_with_its_algorithm_because;
  // Why it cannot be fused, after "a T optimizer cannot be fused: ".
  std::string not_fused_because;
  // Its state per parameter, in parameter-sized tensors, and what they are
  // (bagua plan's memory estimate).
  int64_t state_tensors = 0;
  std::string state;
  // bagua bench measures after at least this many warm-up steps with it.
  int64_t bench_warmup_at_least = 0;
  // The optimizer type the other algorithms take in its place when bagua
  // bench compares them on its recipe (same hyperparameters).
  std::string stand_in;
};

// A recipe this algorithm cannot run: the keyword argument to blame
// (e.g. "peer_selection_mode") and why, with what to do instead.
struct KwargProblem {
  std::string key;
  std::string message;
};

struct AlgorithmDescriptor {
  std::string name;         // "gradient_allreduce"
  std::string description;  // one line
  nlohmann::json defaults;  // every accepted keyword argument with its default
  AlgorithmTraits traits;
  // Filled when traits.required_optimizer is.
  RequiredOptimizer optimizer;
  // bagua plan's prediction of one step (or round): required.
  TrafficModel traffic;
  // Keyword arguments (over the defaults) whose traffic differs in kind,
  // planned beside the defaults (e.g. the other `hierarchical`).
  std::vector<nlohmann::json> plan_variants;
  // Optional: a combination of complete kwargs and world size this
  // algorithm cannot run, found before anything starts (bagua validate).
  std::function<std::optional<KwargProblem>(const nlohmann::json& kwargs, int nnodes, int nproc_per_node)>
      check_world;
};

// Every algorithm, in a stable order (Bagua's six).
const std::vector<AlgorithmDescriptor>& algorithm_catalog();

// The descriptor called `name`, or nullptr.
const AlgorithmDescriptor* find_algorithm(const std::string& name);

// The descriptor of the algorithm that requires optimizers of recipe type
// `optimizer_type` (AlgorithmTraits::required_optimizer), or nullptr when
// any algorithm takes it.
const AlgorithmDescriptor* find_optimizer_owner(const std::string& optimizer_type);

// "gradient_allreduce, bytegrad, ..." in catalog order.
std::string algorithm_names();

// The descriptor's defaults with `kwargs` applied. Throws InvalidArgument
// for an unknown name (listing the known ones), keyword arguments that are
// not a mapping, an unknown keyword argument (naming the accepted ones), or
// a value whose JSON type differs from the default's (`hierarchical` takes a
// boolean or "auto" whatever its default).
nlohmann::json complete_kwargs(const std::string& name, const nlohmann::json& kwargs);

// Whether `value` may be given for the keyword argument `key` whose default
// is `def`: a value of the default's JSON type, and for `hierarchical` a
// boolean or "auto".
bool kwarg_fits(const std::string& key, const nlohmann::json& def, const nlohmann::json& value);

// `hierarchical: auto` (the default of every algorithm whose Bagua default
// is true): hierarchical when the job spans nodes, flat within one. Bagua
// defaults to hierarchical, which on one node leaves the compressed and
// decentralized algorithms nothing to do between workers.
bool hierarchical_for(const nlohmann::json& value, int nnodes);

// complete_kwargs() with every "auto" decided for a job of `nnodes` nodes:
// what the algorithm is built with. Throws as complete_kwargs().
nlohmann::json resolve_kwargs(const std::string& name, const nlohmann::json& kwargs, int nnodes);

// "hierarchical: auto (flat on one node)" when the recipe left it to auto,
// "hierarchical: true" when it said so, empty for an algorithm without it:
// what bagua run's first lines and bagua validate say (nnodes 0: not known
// before it starts, an elastic job's).
std::string hierarchical_choice(const std::string& name, const nlohmann::json& kwargs, int nnodes);

}  // namespace bagua
