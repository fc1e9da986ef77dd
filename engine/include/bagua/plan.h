// A run predicted before it starts: what `bagua run RECIPE` would build,
// send and hold, computed without starting a worker (`bagua plan`).
//
// make_plan() loads the recipe's TorchScript model (only to read the names,
// shapes, dtypes and requires_grad of its parameters and buffers) and, unless
// told not to, its data (to count samples and measure what each worker
// holds). From them and the recipe it derives:
//   - the world: nodes x processes per node, and the node leaders (the first
//     rank of each node) that talk across nodes in hierarchical algorithms;
//   - the parameters, which optimizer takes each (the trainer's rule: the
//     first optimizer whose globs match), and which model.ignore_params
//     keeps out of communication;
//   - the buckets, by the library's own make_buckets() over the tensors in
//     the order BaguaModule registers them (reverse model order), with each
//     algorithm's bucket options (bytegrad and qadam pad every bucket to a
//     multiple of the world size);
//   - the bytes each worker sends, counted as ProcessGroup::bytes_sent()
//     counts them (the `comm_bytes` of metrics.jsonl): one figure per call,
//     rounded as the counter rounds it, summed, for the recipe's algorithm
//     and for every algorithm of algorithm_catalog(), each by its own
//     traffic model (AlgorithmDescriptor::traffic; docs/algorithms.md has
//     the formulas);
//   - a memory estimate per worker and the steps per epoch and in all, as
//     the trainer computes them (DistributedSampler, batch size, max_steps).
//
// Bytes are split by where they go (bagua/algorithms/traffic.h).
//
// Async sends between steps, from a thread, once per averaging round: its
// rounds are reported per round (`per_round`), never as bytes per step.
//
// Throws bagua::Error, a user error (is_user_error()), for a model that
// cannot be loaded, a model.ignore_params glob that matches no parameter, or
// an optimizer whose globs match nothing (bagua run fails the same way), and
// DataError for bad data. What bagua run would refuse on this machine (a
// CUDA device where there is none, an unimplemented feature) is a note in
// Plan::notes instead: a plan may be made away from the machines that run.
#pragma once

#include <bagua/algorithms/traffic.h>
#include <bagua/recipe.h>

#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bagua {

struct PlanOptions {
  // Load the training (and eval) data to count samples and measure its
  // memory. Without it, steps and data memory are left unknown (0).
  bool load_data = true;
  // "gloo" or "nccl"; empty: as a worker of this recipe would pick on this
  // machine (gloo on CPUs). Only the wire size of float16/bfloat16
  // reductions depends on it (Gloo reduces them as float32).
  std::string backend;
};

struct PlanTensor {
  std::string name;
  std::vector<int64_t> shape;
  c10::ScalarType dtype = c10::ScalarType::Float;
  int64_t numel = 0;
  int64_t bytes = 0;
  bool trainable = false;  // requires_grad
  bool ignored = false;    // matched by model.ignore_params: not communicated
  int optimizer = -1;      // index into recipe.optimizers; -1: none (frozen)
};

struct PlanDtype {
  c10::ScalarType dtype = c10::ScalarType::Float;
  int64_t tensors = 0, numel = 0, bytes = 0;
};

struct PlanParameters {
  std::vector<PlanTensor> parameters;  // model order
  std::vector<PlanTensor> buffers;     // model order (BatchNorm statistics, ...)
  std::vector<PlanDtype> dtypes;       // of the parameters
  int64_t numel = 0, bytes = 0;                        // every parameter
  int64_t trainable_numel = 0, trainable_bytes = 0;    // requires_grad
  int64_t communicated_numel = 0, communicated_bytes = 0;  // trainable and not ignored
  int64_t buffer_bytes = 0;
};

struct PlanMemory {
  int64_t parameters = 0;       // every parameter of the model
  int64_t buffers = 0;          // the model's buffers
  int64_t gradients = 0;        // in the buckets' buffers when flattened (padding included)
  int64_t optimizer_state = 0;  // by optimizer type (docs/plan.md)
  int64_t algorithm_buffers = 0;
  int64_t transient = 0;        // the most allocated for one step's communication
  int64_t data = 0;             // training (and eval) data as loaded, on every worker
  int64_t total() const {
    return parameters + buffers + gradients + optimizer_state + algorithm_buffers + transient + data;
  }
  std::vector<std::string> optimizer_notes;  // per optimizer: type and what it keeps
};

struct PlanSteps {
  bool known = false;  // false without data
  int64_t train_samples = 0;
  int64_t eval_samples = 0;
  int64_t samples_per_worker = 0;  // per epoch (DistributedSampler)
  int64_t batch_size = 0;          // per worker
  int64_t last_batch = 0;          // size of each worker's last batch of an epoch
  int64_t per_epoch = 0;
  int64_t epochs = 0;
  std::optional<int64_t> max_steps;
  int64_t total = 0;
  bool drop_last = false;
  // Streamed training data (tokens, image_folder): bytes each worker reads
  // from its files per step (a full batch; image files by their mean size);
  // 0 for data held in memory.
  int64_t read_bytes_per_step = 0;
};

struct Plan {
  std::string recipe_name, recipe_source;
  PlanWorld world;
  PlanParameters parameters;
  PlanAlgorithm algorithm;                  // the recipe's
  std::vector<PlanAlgorithm> alternatives;  // every registry algorithm and its variants (the recipe's first)
  PlanMemory memory;
  PlanSteps steps;
  std::string train_data, eval_data;        // Dataset::describe()
  std::vector<std::string> notes;           // things the reader should know (bagua run would refuse ...)
};

// See the file comment.
Plan make_plan(const Recipe& recipe, const PlanOptions& options = {});

// Every figure of the plan, machine-readable (docs/plan.md lists the keys).
nlohmann::json plan_to_json(const Plan& plan);

// "float32", "bfloat16", ... as the plan's JSON writes dtypes.
std::string plan_dtype_name(c10::ScalarType dtype);

}  // namespace bagua
