// What a worker of `bagua run` or `bagua bench` stands on before it trains:
// its device, the process group (and a Gloo twin for the loop's own small
// collectives), its threads, the TorchScript model on that device, and the
// data sets. Both commands build it here, so they choose devices, backends
// and data the same way and fail with the same words.
//
// Contract:
//   - choose_device(): train.device resolved for this worker: GPU
//     LOCAL_RANK modulo the visible GPUs (made the current device), or the
//     CPU. `cuda` without a GPU, or on a build without CUDA, throws a user
//     Error saying which.
//   - join(): joins the default process group from torchrun's variables
//     (unless already joined), with the recipe's backend (auto is Gloo on
//     the CPU; on a GPU, init_process_group's choice) and timeout; makes
//     `control`, a Gloo twin without per-call verification; sets the
//     intra-op threads (`threads`, or cores / local workers).
//   - load_model(): the TorchScript model, on the device, in train mode;
//     a file that is not TorchScript (torch.save's pickles, anything else)
//     is a one-line user Error naming model.torchscript, what the file is,
//     and how to export one.
//   - load_training_set() / load_eval_set(): the recipe's data (the
//     training set through data.cache when the recipe asks for it); eval
//     inputs of another dtype than the training set's are cast when that is
//     safe (whole numbers to floats), else a user Error. `shared`: the
//     launcher's inflated IDX images (LoadOptions::shared). The two steps of
//     load_eval_set(), for a caller that loads data.eval itself (bagua
//     plan): eval_set_options() are the options to load it with (its
//     classes labelled as data.train's), eval_inputs_as_train() the cast or
//     the Error.
#pragma once

#include <bagua/communication.h>
#include <bagua/data.h>
#include <bagua/recipe_spec.h>

#include <ATen/core/Tensor.h>
#include <torch/script.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bagua::train {

at::Device choose_device(Device wanted, int local_rank);

// LOCAL_RANK from the environment (0 when unset).
int local_rank_from_env();

struct JoinOptions {
  Backend backend = Backend::kAuto;
  std::chrono::seconds timeout{300};
  std::optional<int> threads;  // empty: cores / LOCAL_WORLD_SIZE
};

struct WorkerEnvironment {
  at::Device device{at::kCPU};
  int rank = 0;
  int world = 1;
  // The loop's own small collectives (stop flags, metrics, checksums) on
  // CPU tensors over Gloo, so they never wait on a GPU's stream.
  ProcessGroupPtr control;

  static WorkerEnvironment join(const at::Device& device, const JoinOptions& options);
};

torch::jit::Module load_model(const std::string& torchscript, const at::Device& device);

std::shared_ptr<Dataset> load_training_set(const Recipe& recipe, bool through_cache);
std::shared_ptr<Dataset> load_eval_set(const Recipe& recipe, const Dataset& train, const SharedData* shared = nullptr);
LoadOptions eval_set_options(const Recipe& recipe, const Dataset& train);
std::shared_ptr<Dataset> eval_inputs_as_train(std::shared_ptr<Dataset> eval, const Dataset& train);

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
NamedTensors named_parameters(const torch::jit::Module& module);
NamedTensors named_buffers(const torch::jit::Module& module);

}  // namespace bagua::train
