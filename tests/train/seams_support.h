// What the trainer-part tests share (seams_test.cpp, seams_scenarios.cpp).
#pragma once

#include "train/nonfinite_guard.h"

#include <bagua/communication.h>

#include <torch/torch.h>

namespace bagua::testing {

// A Gloo twin of the default group without per-call verification, as the
// trainer's control and vote groups are.
inline ProcessGroupPtr gloo_twin() {
  auto g = default_group()->duplicate("gloo");
  g->set_verify_collectives(false);
  return g;
}

// One parameter whose gradient is `grad` everywhere.
inline train::NonFiniteGuard::NamedTensors param_with_grad(float grad) {
  at::Tensor p = torch::zeros({3}, torch::requires_grad());
  p.mutable_grad() = torch::full({3}, grad);
  return {{"layer.weight", p}};
}

}  // namespace bagua::testing
