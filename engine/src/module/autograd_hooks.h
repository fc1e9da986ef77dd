// The one place that touches LibTorch's autograd internals: hooks on a
// parameter's gradient accumulator (run after its .grad is updated) and a
// callback at the end of the running backward pass. Kept small because
// these APIs move between LibTorch versions.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace torch::autograd {
struct Node;
}

namespace bagua::module {

// A hook registered on a parameter's gradient accumulator; removed when
// destroyed.
class GradAccumulatorHook {
 public:
  GradAccumulatorHook(const at::Tensor& parameter, std::function<void()> on_accumulated);
  ~GradAccumulatorHook();
  GradAccumulatorHook(const GradAccumulatorHook&) = delete;
  GradAccumulatorHook& operator=(const GradAccumulatorHook&) = delete;

 private:
  std::shared_ptr<torch::autograd::Node> accumulator_;  // kept alive, else the hook is lost
  uintptr_t key_ = 0;
};

// Runs `callback` when the backward pass now running finishes (before
// backward() returns). Call only from inside a backward pass (a hook).
void at_end_of_backward(std::function<void()> callback);

}  // namespace bagua::module
