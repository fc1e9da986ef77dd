// The per-parameter optimizer state of LibTorch's elementwise optimizers,
// reached by field: what the fused optimizer needs to flatten a state
// (tensors shaped like the parameter) and to tell whether the states of
// several parameters can share one (equal step counts).
#pragma once

#include <torch/optim/optimizer.h>

#include <vector>

namespace bagua::optim {

// Whether fuse_optimizer knows `optimizer`'s type: SGD, Adam, AdamW,
// RMSprop or Adagrad.
bool is_fusable_type(const torch::optim::Optimizer& optimizer);

struct ParamStateFields {
  std::vector<at::Tensor*> tensors;  // shaped like the parameter (undefined when unused)
  std::vector<double> counters;      // step counts: equal for states that share a buffer
};

// The fields of a state of one of the types above; throws InvalidArgument
// for any other.
ParamStateFields fields_of(torch::optim::OptimizerParamState& state);

}  // namespace bagua::optim
