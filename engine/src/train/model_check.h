// check_model() (bagua/preflight.h) on a model and data already loaded:
// bagua plan loads both for its own figures and tries the model on them
// here rather than loading them again.
//
// Contract: `eval` is data.eval as the workers see it (load_eval_set(), or
// eval_inputs_as_train() over a set loaded with eval_set_options()), or
// null; throws what check_model() throws (user Errors naming the key).
#pragma once

#include <bagua/data.h>
#include <bagua/recipe_spec.h>

#include <torch/script.h>

#include <string>

namespace bagua::train {

void check_model_on(const Recipe& recipe, torch::jit::Module& module, const Dataset& train, const Dataset* eval,
                    const std::string& trace_file = "");

}  // namespace bagua::train
