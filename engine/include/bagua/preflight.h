// The checks `bagua run`, `bagua plan` and `bagua bench` make before any
// worker starts, so that what cannot run fails once, in the launcher, with
// the recipe key that says why, instead of in every worker.
//
// Contract:
//   - check_supported(): throws a user Error naming the recipe key when
//     the recipe asks for something this build cannot run (an algorithm
//     without an implementation, train.device: cuda without a GPU).
//   - check_data(): checks every data source of the recipe without loading
//     it (check_dataset()), so bad data fails before any worker starts
//     (throws DataError naming file and line or record). With `share`, IDX
//     images are kept in memory for the workers to map (SharedData,
//     bagua/data.h).
//   - check_model(): loads model.torchscript on the CPU and runs two
//     training samples through the model and the loss (model.loss, or the
//     model's own), so that a file that is not TorchScript, inputs of a
//     shape or dtype the model does not take, or an output the loss cannot
//     take fail in one line (a user Error) naming the key to change
//     (model.torchscript, data.train.input_shape, model.loss). A
//     TorchScript traceback is never in the message: with `trace_file`, it
//     is written there and the message names the file.
#pragma once

#include <bagua/recipe.h>

#include <string>

namespace bagua {

class SharedData;  // bagua/data.h

void check_supported(const Recipe& recipe);

void check_data(const Recipe& recipe, SharedData* share = nullptr);

void check_model(const Recipe& recipe, const std::string& trace_file = "");

}  // namespace bagua
