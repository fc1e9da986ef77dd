#include "train/worker_environment.h"

#include <bagua/errors.h>
#include <bagua/model_file.h>

#include "comm/c10d_compat.h"
#include "train/components.h"
#include "train/dataset_cache.h"

#include <ATen/Parallel.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace bagua::train {

namespace {

Error no_gpu_error() {
#ifdef BAGUA_WITH_CUDA
  return Error("train.device is cuda, but no GPU is visible here (check nvidia-smi and CUDA_VISIBLE_DEVICES), or "
               "set train.device to auto or cpu",
               true);
#else
  return Error("train.device is cuda, but this bagua was built without CUDA (LibTorch CPU); build it against a "
               "CUDA LibTorch (scripts/build.sh --cuda, docs/building.md), or set train.device to auto or cpu",
               true);
#endif
}

int default_threads() {
  unsigned cores = std::thread::hardware_concurrency();
  int local = 1;
  if (const char* v = std::getenv("LOCAL_WORLD_SIZE")) local = std::max(1, std::atoi(v));
  return std::max(1, static_cast<int>(cores == 0 ? 1 : cores) / local);
}

// The eval set as the model will see it: JSONL inputs are typed per file
// (integer-only lists are token ids, int64), so an eval file whose numbers
// happen to be whole would reach a model trained on float32 vectors as
// int64 and fail at the first evaluation, an epoch in. Such inputs are cast
// to the training set's dtype; the opposite (float inputs to a model of
// token ids) is an error before training starts.
class InputsCastTo : public Dataset {
 public:
  InputsCastTo(std::shared_ptr<Dataset> inner, at::ScalarType type) : inner_(std::move(inner)), type_(type) {}
  int64_t size() const override { return inner_->size(); }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    Batch b = inner_->get_batch(indices);
    b.input = b.input.to(type_);
    return b;
  }
  std::string describe() const override {
    return inner_->describe() + " (inputs cast to " + std::string(c10::toString(type_)) + ", as data.train's)";
  }
  int64_t num_classes() const override { return inner_->num_classes(); }
  std::vector<std::string> class_names() const override { return inner_->class_names(); }

 private:
  std::shared_ptr<Dataset> inner_;
  at::ScalarType type_;
};

}  // namespace

at::Device choose_device(Device wanted, int local_rank) {
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (wanted == Device::kCpu || (wanted == Device::kAuto && gpus == 0)) return at::Device(at::kCPU);
  if (gpus == 0) throw no_gpu_error();
  const int index = local_rank % gpus;
  comm::set_cuda_device(index);
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
}

int local_rank_from_env() {
  const char* v = std::getenv("LOCAL_RANK");
  return v ? std::atoi(v) : 0;
}

WorkerEnvironment WorkerEnvironment::join(const at::Device& device, const JoinOptions& options) {
  InitOptions init;
  init.timeout = options.timeout;
  // The device first: a worker on the CPU never asks for NCCL.
  init.backend = device.is_cpu() && options.backend == Backend::kAuto ? "gloo" : to_string(options.backend);
  if (!is_initialized()) init_process_group(init);
  WorkerEnvironment env;
  env.device = device;
  env.rank = get_rank();
  env.world = get_world_size();
  at::set_num_threads(options.threads.value_or(default_threads()));
  env.control = default_group()->duplicate("gloo");
  env.control->set_verify_collectives(false);
  return env;
}

torch::jit::Module load_model(const std::string& torchscript, const at::Device& device) {
  torch::jit::Module module;
  try {
    module = torch::jit::load(torchscript, at::kCPU);
  } catch (const c10::Error& e) {
    std::string why = torchscript_file_problem(torchscript);
    if (why.empty()) {
      why = e.what_without_backtrace();
      if (const auto nl = why.find('\n'); nl != std::string::npos) why.resize(nl);
      why = "LibTorch cannot read it (" + why + ")";
    }
    throw Error("model.torchscript: " + torchscript + " is not a TorchScript file: " + why + "; " +
                    kTorchScriptExportHint,
                true);
  }
  module.to(device);
  module.train();
  return module;
}

std::shared_ptr<Dataset> load_training_set(const Recipe& recipe, bool through_cache) {
  auto train = load_dataset(recipe.data.train, target_kind_for(recipe.model.loss), load_options_for(recipe.data));
  if (through_cache) train = cache_training_set(recipe, std::move(train));  // data.cache: train only
  return train;
}

LoadOptions eval_set_options(const Recipe& recipe, const Dataset& train) {
  LoadOptions options = eval_load_options_for(recipe.data);
  // Named classes (image folders) are labelled as data.train labels them.
  if (recipe.data.eval && recipe.data.eval->format == recipe.data.train.format) {
    options.class_names = train.class_names();
  }
  return options;
}

std::shared_ptr<Dataset> load_eval_set(const Recipe& recipe, const Dataset& train, const SharedData* shared) {
  if (!recipe.data.eval) return nullptr;
  LoadOptions options = eval_set_options(recipe, train);
  options.shared = shared;
  return eval_inputs_as_train(load_dataset(*recipe.data.eval, target_kind_for(recipe.model.loss), options), train);
}

std::shared_ptr<Dataset> eval_inputs_as_train(std::shared_ptr<Dataset> eval, const Dataset& train) {
  if (eval->size() == 0 || train.size() == 0) return eval;
  const at::ScalarType want = train.get_batch({0}).input.scalar_type();
  const at::ScalarType have = eval->get_batch({0}).input.scalar_type();
  if (want == have) return eval;
  if (at::isFloatingType(want) && at::isIntegralType(have, false)) {
    return std::make_shared<InputsCastTo>(std::move(eval), want);
  }
  throw Error("data.eval's inputs are " + std::string(c10::toString(have)) + " but data.train's are " +
                  c10::toString(want) + " (" + eval->describe() + "; train: " + train.describe() +
                  "): a model cannot take both; give both files the same kind of input",
              true);
}

NamedTensors named_parameters(const torch::jit::Module& module) {
  NamedTensors out;
  for (const auto& p : module.named_parameters(true)) out.emplace_back(p.name, p.value);
  return out;
}

NamedTensors named_buffers(const torch::jit::Module& module) {
  NamedTensors out;
  for (const auto& b : module.named_buffers(true)) out.emplace_back(b.name, b.value);
  return out;
}

}  // namespace bagua::train
