// Checkpoints: OUTPUT/checkpoints/step-NNNNNNNN/ with
//   meta.json            step, epoch, position in the epoch, world size, algorithm, recipe name
//   model.pt             every parameter and buffer, by name (torch::serialize archive)
//   optimizer-I.pt       each optimizer's state and hyperparameters
//   rng-rank-R.pt        each rank's CPU generator state
//   recipe.resolved.yaml the recipe that ran
// Written by all ranks into a hidden temporary directory that rank 0 renames
// once complete, so a crash mid-write never leaves a corrupt latest
// checkpoint; only the `keep` newest are kept.
#pragma once

#include <bagua/communication.h>
#include <bagua/distributed.h>
#include <bagua/recipe.h>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace bagua::train {

struct Position {
  int64_t step = 0;            // optimizer steps done
  int64_t epoch = 0;           // 0-based epoch in progress
  int64_t batch_in_epoch = 0;  // batches of that epoch already done
};

// Collective over `group`: every rank calls it at the same step.
void save_checkpoint(const std::string& dir, const Position& pos, const Recipe& recipe,
                     const std::vector<std::pair<std::string, at::Tensor>>& parameters,
                     const std::vector<std::pair<std::string, at::Tensor>>& buffers,
                     const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                     const ProcessGroupPtr& group, int64_t keep);

// The newest complete checkpoint under `dir`, if any.
std::optional<std::string> latest_checkpoint(const std::string& dir);

// Collective. Rank 0 chooses the checkpoint (`path`, or the latest under
// `dir` when path is empty and resume is auto) and tells the others. Rank 0
// loads the model and optimizer state (with_bagua then broadcasts them);
// every rank restores its RNG state when its file is there. Returns the
// position to continue from, or nothing when there is no checkpoint.
// Throws a user Error when the checkpoint's world size differs.
std::optional<Position> resume_checkpoint(const std::string& dir, const std::string& path,
                                          const std::vector<std::pair<std::string, at::Tensor>>& parameters,
                                          const std::vector<std::pair<std::string, at::Tensor>>& buffers,
                                          const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                                          const ProcessGroupPtr& group, std::string* chosen = nullptr);

}  // namespace bagua::train
