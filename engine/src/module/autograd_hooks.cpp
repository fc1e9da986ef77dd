#include "module/autograd_hooks.h"

#include <bagua/errors.h>

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace bagua::module {
namespace {

struct CallbackPostHook : torch::autograd::FunctionPostHook {
  explicit CallbackPostHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }
  std::function<void()> fn_;
};

}  // namespace

GradAccumulatorHook::GradAccumulatorHook(const at::Tensor& parameter, std::function<void()> on_accumulated) {
  if (!parameter.requires_grad() || !parameter.is_leaf()) {
    throw InvalidArgument("only leaf tensors that require grad have a gradient accumulator");
  }
  accumulator_ = torch::autograd::impl::grad_accumulator(parameter);
  key_ = accumulator_->add_post_hook(std::make_unique<CallbackPostHook>(std::move(on_accumulated)));
}

GradAccumulatorHook::~GradAccumulatorHook() {
  if (accumulator_) accumulator_->del_post_hook(key_);
}

void at_end_of_backward(std::function<void()> callback) {
  torch::autograd::Engine::get_default_engine().queue_callback(std::move(callback));
}

}  // namespace bagua::module
