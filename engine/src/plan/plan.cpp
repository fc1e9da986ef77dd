// make_plan() and plan_to_json() (bagua/plan.h): a run predicted from its
// recipe, its model's parameter list and its data, with no worker started.
//
// The traffic of each algorithm is its descriptor's traffic model
// (engine/src/algorithms/NAME_descriptor.cpp); this file gives it the world
// and the buckets, and adds what every algorithm shares (parameters,
// optimizer state, memory, steps).
#include <bagua/plan.h>

#include <bagua/algorithms/catalog.h>
#include <bagua/bucket.h>
#include <bagua/data.h>
#include <bagua/distributed.h>
#include <bagua/errors.h>
#include <bagua/preflight.h>

#include "comm/verify.h"
#include "train/components.h"
#include "train/model_check.h"
#include "train/resume.h"
#include "train/worker_environment.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>

namespace bagua {

namespace {

// ---------------------------------------------------------------- buckets

// The buckets make_buckets() builds from the registered tensors (the build
// parameters, last first) with these options. Always planned unflattened:
// the split is the same, and no buffer is allocated for a prediction.
PlanBuckets bucket_plan(const std::vector<BaguaTensor>& tensors, const Recipe& recipe, int64_t alignment,
                        bool flatten, std::string registers) {
  PlanBuckets out;
  out.registers = std::move(registers);
  out.flatten = flatten;
  out.bucket_bytes = recipe.algorithm.bucket_size;
  out.bucket_size_auto = recipe.algorithm.bucket_size_auto;
  out.alignment = alignment;
  if (tensors.empty()) return out;
  BucketOptions options;
  options.bucket_bytes = recipe.algorithm.bucket_size;
  options.alignment = alignment;
  options.flatten = false;
  for (const auto& b : make_buckets(tensors, options)) {
    PlanBucket p;
    p.name = b->name();
    p.dtype = plan_dtype_name(b->dtype());
    p.element_bytes = static_cast<int64_t>(c10::elementSize(b->dtype()));
    for (const auto& t : b->tensors()) p.tensors.push_back(t.name);
    p.numel = b->numel();
    p.padded_numel = b->padded_numel();
    p.bytes = b->bytes();
    p.padding_bytes = (p.padded_numel - p.numel) * p.element_bytes;
    out.bytes += p.bytes;
    out.padding_bytes += p.padding_bytes;
    out.buckets.push_back(std::move(p));
  }
  return out;
}

// The descriptor's traffic model for `kwargs` (complete).
PlanAlgorithm plan_algorithm(const TrafficContext& ctx, const std::string& name, const nlohmann::json& kwargs) {
  PlanAlgorithm a;
  const AlgorithmDescriptor* d = find_algorithm(name);
  // What the workers would build: hierarchical: auto decided for this world.
  const nlohmann::json resolved = d != nullptr ? resolve_kwargs(name, kwargs, ctx.world.nnodes) : kwargs;
  if (d != nullptr && d->traffic) {
    a = d->traffic(ctx, resolved);
  } else {
    a.runnable = false;
    a.note = "bagua plan has no traffic model for this algorithm yet";
  }
  a.name = name;
  a.kwargs = resolved;
  return a;
}

// The descriptor's defaults with `overrides` applied.
nlohmann::json with_defaults(const AlgorithmDescriptor& d, const nlohmann::json& overrides) {
  nlohmann::json kw = d.defaults;
  for (const auto& [k, v] : overrides.items()) {
    if (kw.contains(k)) kw[k] = v;
  }
  return kw;
}

// ---------------------------------------------------------------- memory

// Optimizer state per parameter of each type, in parameter-sized tensors
// (LibTorch 1.13's optimizers, and those the algorithms require).
std::pair<int64_t, std::string> optimizer_state(const OptimizerSpec& s) {
  if (const AlgorithmDescriptor* owner = find_optimizer_owner(to_string(s.type))) {
    return {owner->optimizer.state_tensors, owner->optimizer.state};
  }
  switch (s.type) {
    case OptimizerType::kSgd:
      return s.momentum != 0 ? std::make_pair(int64_t{1}, std::string("momentum buffer"))
                             : std::make_pair(int64_t{0}, std::string("nothing (no momentum)"));
    case OptimizerType::kAdam:
    case OptimizerType::kAdamW:
      return s.amsgrad ? std::make_pair(int64_t{3}, std::string("exp_avg, exp_avg_sq, max_exp_avg_sq"))
                       : std::make_pair(int64_t{2}, std::string("exp_avg, exp_avg_sq"));
    case OptimizerType::kRmsprop: {
      int64_t k = 1;
      std::string what = "square_avg";
      if (s.momentum > 0) {
        ++k;
        what += ", momentum buffer";
      }
      if (s.centered) {
        ++k;
        what += ", grad_avg";
      }
      return {k, what};
    }
    case OptimizerType::kAdagrad: return {1, "sum"};
    default: break;  // an algorithm's own: above
  }
  return {0, ""};
}

// ---------------------------------------------------------------- helpers

std::string resolve_backend(const Recipe& recipe, const PlanOptions& options, std::string* device) {
  const bool cpu = recipe.train.device == Device::kCpu;
  const int gpus = cpu ? 0 : static_cast<int>(torch::cuda::device_count());
  // Trainer: train.device auto is a GPU when one is visible.
  const bool on_gpu = !cpu && (recipe.train.device == Device::kCuda || gpus > 0);
  *device = on_gpu ? "cuda" : "cpu";
  if (!options.backend.empty()) return options.backend;
  if (recipe.distributed.backend != Backend::kAuto) return to_string(recipe.distributed.backend);
  // init_process_group's auto: NCCL when every local rank has a GPU of its own.
  return on_gpu && gpus >= recipe.distributed.nproc_per_node ? "nccl" : "gloo";
}

PlanTensor tensor_of(const std::string& name, const at::Tensor& t) {
  PlanTensor p;
  p.name = name;
  p.shape = t.sizes().vec();
  p.dtype = t.scalar_type();
  p.numel = t.numel();
  p.bytes = static_cast<int64_t>(t.nbytes());
  p.trainable = t.requires_grad();
  return p;
}

}  // namespace

std::string plan_dtype_name(c10::ScalarType dtype) { return comm::dtype_name(dtype); }

// ---------------------------------------------------------------- make_plan

namespace {

// What make_plan() loads once: the model and the data, kept for the probe
// that follows the figures (train/model_check.h).
struct Loaded {
  std::optional<torch::jit::Module> module;
  std::shared_ptr<Dataset> train, eval;
};

// The parameters and buffers of the model, which are ignored, which
// optimizer takes each, and their totals.
void plan_parameters(const Recipe& recipe, Plan& plan, Loaded& loaded) {
  loaded.module = train::load_model(recipe.model.torchscript, at::kCPU);
  torch::jit::Module& module = *loaded.module;
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& p : module.named_parameters(true)) named.emplace_back(p.name, p.value);
  PlanParameters& params = plan.parameters;
  for (const auto& [name, t] : named) params.parameters.push_back(tensor_of(name, t));
  for (const auto& b : module.named_buffers(true)) {
    params.buffers.push_back(tensor_of(b.name, b.value));
    params.buffer_bytes += params.buffers.back().bytes;
  }

  // model.ignore_params, checked as with_bagua checks it.
  for (const auto& pattern : recipe.model.ignore_params) {
    bool any = false;
    for (auto& p : params.parameters) {
      if (glob_match(pattern, p.name)) p.ignored = any = true;
    }
    if (!any) {
      throw Error("model.ignore_params: '" + pattern + "' matches no parameter of " + recipe.model.torchscript +
                      " (bagua run would stop at the same point)",
                  true);
    }
  }

  // Which optimizer takes each parameter: the trainer's own assignment, run
  // over empty stand-ins so that nothing of the model's size is allocated.
  {
    std::vector<std::pair<std::string, at::Tensor>> stand_ins;
    std::map<const void*, size_t> index_of;
    for (size_t i = 0; i < named.size(); ++i) {
      at::Tensor s = at::empty({0});
      s.requires_grad_(named[i].second.requires_grad());
      index_of[s.unsafeGetTensorImpl()] = i;
      stand_ins.emplace_back(named[i].first, s);
    }
    train::BuiltOptimizers built = train::build_optimizers(recipe.optimizers, stand_ins);
    for (size_t o = 0; o < built.optimizers.size(); ++o) {
      for (const auto& group : built.optimizers[o]->param_groups()) {
        for (const auto& s : group.params()) params.parameters[index_of.at(s.unsafeGetTensorImpl())].optimizer = static_cast<int>(o);
      }
    }
  }

  // Totals and dtypes.
  std::map<c10::ScalarType, PlanDtype> dtypes;
  for (const auto& p : params.parameters) {
    params.numel += p.numel;
    params.bytes += p.bytes;
    if (p.trainable) {
      params.trainable_numel += p.numel;
      params.trainable_bytes += p.bytes;
      if (!p.ignored) {
        params.communicated_numel += p.numel;
        params.communicated_bytes += p.bytes;
      }
    }
    PlanDtype& d = dtypes[p.dtype];
    d.dtype = p.dtype;
    d.tensors += 1;
    d.numel += p.numel;
    d.bytes += p.bytes;
  }
  for (const auto& [t, d] : dtypes) params.dtypes.push_back(d);
}

// The recipe's algorithm, then every algorithm of the catalog at its
// defaults and the variants its descriptor names, over the buckets the
// module would build.
void plan_algorithms(const Recipe& recipe, Plan& plan) {
  const PlanParameters& params = plan.parameters;
  const PlanWorld& world = plan.world;
  // The tensors BaguaModule registers (AlgorithmImpl::init_tensors and
  // weight_tensors: the build parameters, last first).
  std::vector<BaguaTensor> registered;
  for (auto it = params.parameters.rbegin(); it != params.parameters.rend(); ++it) {
    if (!it->trainable || it->ignored) continue;
    BaguaTensor t;
    t.name = it->name;
    t.dtype = it->dtype;
    t.shape = it->shape;
    registered.push_back(std::move(t));
  }
  TrafficContext ctx;
  ctx.world = world;
  ctx.flatten = recipe.algorithm.flatten;
  ctx.bucket_bytes = recipe.algorithm.bucket_size;
  ctx.bucket_size_auto = recipe.algorithm.bucket_size_auto;
  ctx.optimizer_warmup = OptimizerSpec{}.warmup_steps;
  if (recipe.optimizers.size() == 1) {
    ctx.sole_optimizer = to_string(recipe.optimizers[0].type);
    if (find_optimizer_owner(ctx.sole_optimizer)) ctx.optimizer_warmup = recipe.optimizers[0].warmup_steps;
  }
  ctx.buckets = [&registered, &recipe](int64_t alignment, bool flatten, const std::string& registers) {
    return bucket_plan(registered, recipe, alignment, flatten, registers);
  };

  // The recipe's algorithm, then every algorithm of the catalog at its
  // defaults and the variants its descriptor names.
  plan.algorithm = plan_algorithm(ctx, recipe.algorithm.name, recipe.algorithm.kwargs);
  plan.algorithm.is_recipe = true;
  plan.alternatives.push_back(plan.algorithm);
  for (const auto& d : algorithm_catalog()) {
    std::vector<nlohmann::json> variants{d.defaults};
    for (const auto& v : d.plan_variants) variants.push_back(with_defaults(d, v));
    for (const auto& kw : variants) {
      // Each once, as built: a variant may be what auto decides, or the recipe's (listed first).
      const nlohmann::json resolved = resolve_kwargs(d.name, kw, world.nnodes);
      const bool listed = std::any_of(plan.alternatives.begin(), plan.alternatives.end(), [&](const PlanAlgorithm& a) {
        return a.name == d.name && a.kwargs == resolved;
      });
      if (!listed) plan.alternatives.push_back(plan_algorithm(ctx, d.name, resolved));
    }
  }
}

void plan_memory(const Recipe& recipe, Plan& plan) {
  const PlanParameters& params = plan.parameters;
  // Memory per worker (rank 0: a node leader, which holds the most).
  PlanMemory& mem = plan.memory;
  mem.parameters = params.bytes;
  mem.buffers = params.buffer_bytes;
  const PlanAlgorithm& a = plan.algorithm;
  // Flattened gradient buckets hold the gradients, padding included.
  const bool gradient_buckets = a.buckets.flatten && a.buckets.registers.rfind("gradients", 0) == 0;
  mem.gradients = params.trainable_bytes + (gradient_buckets ? a.buckets.padding_bytes : 0);
  for (size_t o = 0; o < recipe.optimizers.size(); ++o) {
    int64_t assigned = 0;
    for (const auto& p : params.parameters) {
      if (p.optimizer == static_cast<int>(o)) assigned += p.bytes;
    }
    auto [copies, what] = optimizer_state(recipe.optimizers[o]);
    mem.optimizer_state += copies * assigned;
    mem.optimizer_notes.push_back("optimizers[" + std::to_string(o) + "] " + to_string(recipe.optimizers[o].type) +
                                  ": " + what + " (" + std::to_string(copies) + " x " + std::to_string(assigned) +
                                  " B of parameters)");
  }
  mem.algorithm_buffers = a.buffer_bytes;
  mem.transient = a.transient_bytes;
}

// Data and steps, counted as the trainer counts them (train/resume.h).
void plan_steps(const Recipe& recipe, const PlanOptions& options, Plan& plan, Loaded& loaded) {
  const PlanWorld& world = plan.world;
  PlanMemory& mem = plan.memory;
  PlanSteps& steps = plan.steps;
  // train.global_batch_size: the per-worker batch it gives (the larger,
  // when the workers do not divide it).
  steps.batch_size = recipe.train.global_batch_size
                         ? (*recipe.train.global_batch_size + world.world_size - 1) / world.world_size
                         : recipe.data.batch_size * recipe.train.grad_accum_steps;
  steps.epochs = recipe.train.epochs;
  steps.max_steps = recipe.train.max_steps;
  steps.drop_last = recipe.data.sampler.drop_last;
  if (options.load_data) {
    auto train = load_dataset(recipe.data.train, target_kind_for(recipe.model.loss), load_options_for(recipe.data));
    loaded.train = train;
    plan.train_data = train->describe();
    mem.data = train->memory_bytes();
    if (recipe.data.eval) {
      // As the workers load it (named classes labelled as data.train's);
      // a class data.train lacks is a note, and the figures are the set's
      // own.
      std::shared_ptr<Dataset> eval;
      try {
        eval = load_dataset(*recipe.data.eval, target_kind_for(recipe.model.loss),
                            train::eval_set_options(recipe, *train));
        loaded.eval = eval;
      } catch (const Error& e) {
        if (!e.is_user_error()) throw;
        plan.notes.push_back(std::string("bagua run would refuse this recipe: ") + e.what());
        eval = load_dataset(*recipe.data.eval, target_kind_for(recipe.model.loss), eval_load_options_for(recipe.data));
      }
      plan.eval_data = eval->describe();
      steps.eval_samples = eval->size();
      mem.data += eval->memory_bytes();
    }
    auto sampler = make_sampler(data_per_step(recipe.data, recipe.train), *train, world.world_size,
                                recipe.train.global_batch_size.value_or(0));
    steps.known = true;
    steps.train_samples = train->size();
    steps.samples_per_worker = sampler->samples_per_rank(0);
    train::StepBudgetInput in;
    in.epochs = recipe.train.epochs;
    in.max_steps = recipe.train.max_steps;
    in.variable_batches = recipe.data.sampler.batch_complexity.has_value();
    in.batches_in_epoch = [&sampler](int64_t e) { return sampler->num_batches(e); };
    const train::StepBudget budget = train::step_budget(in);
    steps.per_epoch = budget.per_epoch;
    steps.total = budget.total;
    // Rank 0's last batch (a global batch the workers do not divide gives
    // rank 0 the larger share); the first epoch's, for variable-size batches.
    const auto first = sampler->batch_list(0, 0);
    steps.last_batch = first->size() == 0 ? 0 : static_cast<int64_t>(first->at(first->size() - 1).size());
    steps.read_bytes_per_step = static_cast<int64_t>(train->read_bytes_per_sample() * static_cast<double>(steps.batch_size));
    if (in.variable_batches) {
      plan.notes.push_back("variable-size batches (data.sampler.batch_complexity): per_epoch and batch sizes are "
                           "the first epoch's; other epochs differ");
    }
    if (steps.per_epoch == 0) {
      plan.notes.push_back("the training set gives each worker no samples: bagua run would stop before the first step");
    }
  }
}

}  // namespace

Plan make_plan(const Recipe& recipe, const PlanOptions& options) {
  Plan plan;
  plan.recipe_name = recipe.name;
  plan.recipe_source = recipe.source;

  // The world, as the launcher numbers it: node i holds ranks i L .. i L + L - 1.
  PlanWorld& world = plan.world;
  world.nnodes = recipe.distributed.nnodes;
  world.nproc_per_node = recipe.distributed.nproc_per_node;
  world.world_size = world.nnodes * world.nproc_per_node;
  for (int node = 0; node < world.nnodes; ++node) world.node_leaders.push_back(node * world.nproc_per_node);
  world.backend = resolve_backend(recipe, options, &world.device);

  // What bagua run would refuse is worth saying, not failing on: a plan may
  // be made on a machine other than the one that will run it.
  try {
    check_supported(recipe);
  } catch (const Error& e) {
    plan.notes.push_back(std::string("bagua run would refuse this recipe here: ") + e.what());
  }

  Loaded loaded;
  plan_parameters(recipe, plan, loaded);
  plan_algorithms(recipe, plan);
  plan_memory(recipe, plan);
  plan_steps(recipe, options, plan, loaded);
  // The model on two samples of the data, as bagua run's preflight tries it:
  // inputs it cannot take are a note here (the figures above hold), where
  // run refuses to start.
  if (plan.steps.known && plan.steps.train_samples > 0 && loaded.module && loaded.train) {
    try {
      const std::shared_ptr<Dataset> eval =
          loaded.eval ? train::eval_inputs_as_train(loaded.eval, *loaded.train) : nullptr;
      train::check_model_on(recipe, *loaded.module, *loaded.train, eval.get());
    } catch (const Error& e) {
      if (!e.is_user_error()) throw;
      plan.notes.push_back(std::string("bagua run would refuse this recipe: ") + e.what());
    }
  }
  return plan;
}

// ---------------------------------------------------------------- JSON

namespace {

nlohmann::json traffic_json(const PlanTraffic& t) {
  return {{"total", t.total()}, {"whole_group", t.whole_group}, {"within_node", t.within_node},
          {"between_nodes", t.between_nodes}};
}

nlohmann::json tensor_json(const PlanTensor& t) {
  nlohmann::json j = {{"name", t.name},           {"shape", t.shape},         {"dtype", plan_dtype_name(t.dtype)},
                      {"numel", t.numel},         {"bytes", t.bytes},         {"trainable", t.trainable},
                      {"ignored", t.ignored}};
  j["optimizer"] = t.optimizer >= 0 ? nlohmann::json(t.optimizer) : nlohmann::json();
  return j;
}

nlohmann::json buckets_json(const PlanBuckets& b) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& k : b.buckets) {
    list.push_back({{"name", k.name},
                    {"dtype", k.dtype},
                    {"tensors", k.tensors},
                    {"numel", k.numel},
                    {"padded_numel", k.padded_numel},
                    {"bytes", k.bytes},
                    {"padding_bytes", k.padding_bytes}});
  }
  return {{"registers", b.registers}, {"flatten", b.flatten},       {"bucket_size", b.bucket_bytes}, {"bucket_size_auto", b.bucket_size_auto},
          {"alignment", b.alignment}, {"count", b.buckets.size()}, {"bytes", b.bytes},
          {"padding_bytes", b.padding_bytes}, {"list", list}};
}

nlohmann::json algorithm_json(const Plan& plan, const PlanAlgorithm& a) {
  nlohmann::json phases = nlohmann::json::array();
  for (const auto& p : a.phases) {
    nlohmann::json j = {{"name", p.name}, {"what", p.what}, {"per_round", p.per_round}};
    if (!p.per_round) {
      j["first_step"] = p.first_step;
      j["last_step"] = p.last_step ? nlohmann::json(*p.last_step) : nlohmann::json();
      j["every"] = p.every;
    }
    j["sent"] = {{"node_leader", traffic_json(p.leader)}, {"other_worker", traffic_json(p.other)}};
    // Every collective is symmetric as the counter counts it.
    j["received"] = j["sent"];
    phases.push_back(j);
  }
  nlohmann::json j = {{"name", a.name},         {"kwargs", a.kwargs},     {"is_recipe", a.is_recipe},
                      {"runnable", a.runnable}, {"note", a.note},         {"phases", phases},
                      {"buffer_bytes", a.buffer_bytes}, {"transient_bytes", a.transient_bytes}};
  if (a.runnable) {
    j["buckets"] = buckets_json(a.buckets);
    j["steady_bytes_per_step"] = a.steady_bytes_per_step();
    j["run_bytes"] = plan.steps.known ? nlohmann::json(a.bytes_sent(1, plan.steps.total)) : nlohmann::json();
  }
  if (a.rounds_per_second_at_most) {
    j["rounds_per_second_at_most"] = *a.rounds_per_second_at_most;
    // Per second is not predictable: a round waits sync_interval_ms, then
    // takes as long as its collectives and the wait for the weights.
    j["bytes_per_second"] = nullptr;
  }
  return j;
}

}  // namespace

nlohmann::json plan_to_json(const Plan& plan) {
  const PlanParameters& p = plan.parameters;
  nlohmann::json params = nlohmann::json::array(), buffers = nlohmann::json::array(),
                 dtypes = nlohmann::json::array(), ignored = nlohmann::json::array();
  for (const auto& t : p.parameters) {
    params.push_back(tensor_json(t));
    if (t.ignored) ignored.push_back({{"name", t.name}, {"numel", t.numel}, {"bytes", t.bytes}});
  }
  for (const auto& t : p.buffers) buffers.push_back(tensor_json(t));
  for (const auto& d : p.dtypes) {
    dtypes.push_back({{"dtype", plan_dtype_name(d.dtype)}, {"tensors", d.tensors}, {"numel", d.numel}, {"bytes", d.bytes}});
  }
  nlohmann::json alternatives = nlohmann::json::array();
  for (const auto& a : plan.alternatives) alternatives.push_back(algorithm_json(plan, a));
  const PlanMemory& m = plan.memory;
  const PlanSteps& s = plan.steps;
  nlohmann::json steps = {{"known", s.known},
                          {"train_samples", s.train_samples},
                          {"eval_samples", s.eval_samples},
                          {"samples_per_worker", s.samples_per_worker},
                          {"batch_size", s.batch_size},
                          {"last_batch", s.last_batch},
                          {"per_epoch", s.per_epoch},
                          {"epochs", s.epochs},
                          {"total", s.total},
                          {"drop_last", s.drop_last},
                          {"read_bytes_per_step", s.read_bytes_per_step}};
  steps["max_steps"] = s.max_steps ? nlohmann::json(*s.max_steps) : nlohmann::json();
  return {
      {"recipe", {{"name", plan.recipe_name}, {"source", plan.recipe_source}}},
      {"world",
       {{"nnodes", plan.world.nnodes},
        {"nproc_per_node", plan.world.nproc_per_node},
        {"world_size", plan.world.world_size},
        {"node_leaders", plan.world.node_leaders},
        {"backend", plan.world.backend},
        {"device", plan.world.device}}},
      {"parameters",
       {{"count", p.parameters.size()},
        {"numel", p.numel},
        {"bytes", p.bytes},
        {"trainable_numel", p.trainable_numel},
        {"trainable_bytes", p.trainable_bytes},
        {"communicated_numel", p.communicated_numel},
        {"communicated_bytes", p.communicated_bytes},
        {"dtypes", dtypes},
        {"ignored", ignored},
        {"list", params},
        {"buffers", {{"count", p.buffers.size()}, {"bytes", p.buffer_bytes}, {"list", buffers}}}}},
      {"buckets", buckets_json(plan.algorithm.buckets)},
      {"algorithm", algorithm_json(plan, plan.algorithm)},
      {"algorithms", alternatives},
      {"memory",
       {{"parameters", m.parameters},
        {"buffers", m.buffers},
        {"gradients", m.gradients},
        {"optimizer_state", m.optimizer_state},
        {"algorithm_buffers", m.algorithm_buffers},
        {"transient", m.transient},
        {"data", m.data},
        {"total", m.total()},
        {"optimizers", m.optimizer_notes},
        {"excludes", "activations, autograd's saved tensors, LibTorch and the process itself"}}},
      {"steps", steps},
      {"data", {{"train", plan.train_data}, {"eval", plan.eval_data}}},
      {"notes", plan.notes},
  };
}

}  // namespace bagua
