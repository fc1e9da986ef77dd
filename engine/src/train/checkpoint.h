// Checkpoints: OUTPUT/checkpoints/step-NNNNNNNN/ with
//   meta.json            step, epoch, position in the epoch, world size, algorithm, recipe name,
//                        the run's provenance (bagua/provenance.h): CheckpointMeta
//                        (bagua/checkpoint_meta.h), the one spelling of its keys
//   model.pt             every parameter and buffer, by name (torch::serialize archive):
//                        rank 0's, or the ranks' average for algorithms that keep one
//                        model per rank (the trainer passes the averaged weights)
//   optimizer-I.pt       rank 0's state and hyperparameters of each optimizer
//   rank-R.pt            rank R's own state: its CPU generator, the module's step
//                        counter, the algorithm's state, and, when ranks differ
//                        (per-rank algorithms, rank-local ignored parameters),
//                        its parameters, buffers and optimizer states
//   recipe.resolved.yaml the recipe that ran
//   meta.json also lists every file with its size and CRC-32 ("files").
// Written by all ranks into a hidden temporary directory that rank 0 renames
// once complete (a step saved again moves its earlier copy aside first), so
// a crash mid-write never leaves a corrupt latest checkpoint nor loses one;
// every write is checked and synced, and a failed one fails the save on
// every rank alike. Only the `keep` newest up to the one written
// are kept; newer ones are never pruned. A resume verifies the files.
#pragma once

#include <bagua/checkpoint_meta.h>
#include <bagua/communication.h>
#include <bagua/distributed.h>
#include <bagua/recipe.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>

namespace bagua::train {

using Position = TrainingPosition;  // bagua/checkpoint_meta.h

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// What each rank writes of its own into rank-R.pt (and reads back).
// (The algorithm's step counter is not among it: one forward per optimizer
// step makes it the checkpoint's step.)
struct RankState {
  // Its own parameters and buffers (and its optimizers' state) too.
  bool model = false;
  NamedTensors parameters, buffers;  // this rank's own (model only)
  std::function<void(torch::serialize::OutputArchive&)> save_algorithm;
  std::function<void(torch::serialize::InputArchive&)> load_algorithm;
};

// Writes a TorchScript module to `path` through a temporary file renamed
// into place, every write checked: a full disk throws a bagua::Error naming
// the file and leaves no partial model behind.
void save_module(const torch::jit::Module& module, const std::string& path);

// save_module() of a host copy when the module is on a GPU, so the file
// loads on machines without one too.
void save_host_module(const torch::jit::Module& module, const std::string& path);

// What save_checkpoint() writes, and where.
struct SaveCheckpointOptions {
  std::string dir;                 // OUTPUT/checkpoints: the checkpoint becomes DIR/step-NNNNNNNN
  const Recipe* recipe = nullptr;  // recorded (recipe.resolved.yaml, meta.json)
  // meta.json: the caller gives the position (resumes continue from it), the
  // data plan, the progress, the provenance and the tuned bucket size;
  // save_checkpoint() fills the world size, the recipe's and algorithm's
  // names, the optimizer count and the files.
  CheckpointMeta meta;
  // The one model of model.pt (rank 0's; the ranks' average for per-rank
  // algorithms) and the optimizers whose state rank 0 writes.
  NamedTensors parameters, buffers;
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers;
  ProcessGroupPtr group;  // every rank
  int64_t keep = 3;       // checkpoints kept, this one included
  RankState rank;         // what this rank writes of its own
};

// Collective over `options.group`: every rank calls it at the same step.
void save_checkpoint(const SaveCheckpointOptions& options);

// This rank's part of checkpoint `where` (after with_bagua, which
// broadcasts rank 0's state): RNG, algorithm state, and its own parameters,
// buffers and optimizer states when the checkpoint holds them.
// With `rng_only` (a resume at another world size, whose rank files belong
// to other ranks' data and peers) only the RNG is restored, when this rank
// had a file.
void load_rank_state(const std::string& where, const NamedTensors& parameters, const NamedTensors& buffers,
                     const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                     const RankState& rank, bool rng_only = false);

// Collective. Rank 0 first finishes what a stopped save left (a complete
// .step-N.tmp or .step-N.old whose step has no checkpoint becomes it; the
// rest is removed), then chooses the
// checkpoint (`path`, or the newest intact one under `dir` when path is
// empty, renaming damaged newer ones to step-N.damaged with a warning) and
// tells the others; a damaged `path`, or no intact one, throws a user
// Error. Rank 0
// loads the model and optimizer state (with_bagua then broadcasts them;
// load_rank_state() then restores what is each rank's own). Returns the
// checkpoint chosen, or nothing when there is none.
// The checkpoint's world size may differ from the group's: `verify` (or the
// caller) decides whether and how to resume it (re-sharding the data,
// skipping rank files); what `verify` throws is thrown.
// Checks a chosen checkpoint's meta.json on every rank before any state
// is loaded (the data plan, the provenance); throws to refuse it.
using MetaCheck = std::function<void(const std::string& where, const CheckpointMeta& meta)>;

// The checkpoint a resume continues from: its directory and its meta.json
// (the position to continue from is meta.position).
struct ResumedCheckpoint {
  std::string where;
  CheckpointMeta meta;
};

std::optional<ResumedCheckpoint> resume_checkpoint(const std::string& dir, const std::string& path,
                                                   const NamedTensors& parameters, const NamedTensors& buffers,
                                                   const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                                                   const ProcessGroupPtr& group, const MetaCheck& verify = {});

}  // namespace bagua::train
