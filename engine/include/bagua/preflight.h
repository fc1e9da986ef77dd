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
//     is written there and the message names the file. With `shared`
//     (check_data()'s), IDX images are mapped from it, not inflated again.
//   - check_output_dir(): what bagua run finds in output.dir before any
//     worker starts. Throws a user Error when the directory holds the run
//     of a recipe of another name (unless checkpoint.allow_recipe_change),
//     and, with checkpoint.resume: auto, when the workers would refuse to
//     resume its newest checkpoint (another model file, or a key that
//     changes training, unless checkpoint.allow_model_change /
//     allow_recipe_change), with the way out. Says in finished_at the step
//     of a run there that already ended with this recipe's length, data
//     and world: nothing is left to train. Reads only; writes nothing.
#pragma once

#include <bagua/recipe.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace bagua {

class SharedData;  // bagua/data.h

void check_supported(const Recipe& recipe);

void check_data(const Recipe& recipe, SharedData* share = nullptr);

void check_model(const Recipe& recipe, const std::string& trace_file = "", const SharedData* shared = nullptr);

struct OutputDirCheck {
  std::optional<int64_t> finished_at;  // the run there is complete at this step
};

// `provenance`: this run's recipe_provenance() (bagua/provenance.h).
OutputDirCheck check_output_dir(const Recipe& recipe, const nlohmann::json& provenance);

}  // namespace bagua
