// Resume and the step budget, as free functions of plain inputs: where a
// resumed run continues, whether it changed size, the learning-rate
// schedule's units, and how many steps a run has. The trainer and `bagua
// plan` count steps here, so a plan predicts what the run does.
//
// Contract:
//   - decide_resize(): nothing when the checkpoint's world size and global
//     batch are this run's; else the checkpoint's and the position in its
//     epoch's sample order the run continues from (the samples every rank
//     had taken before the saved step: meta.json's epoch_position, or, for
//     checkpoints without it, its whole batches of batch x world).
//   - step_budget(): the steps of one whole epoch and of the run, the resumed
//     steps included: a run that changed size counts the steps done, then
//     what is left at this size; train.max_steps caps the total.
//   - schedule_units() / schedule_step(): once a run changed size, the
//     schedule follows the samples seen in units of its first global batch
//     (whole epochs count as its first steps per epoch); otherwise the step.
#pragma once

#include <bagua/checkpoint_meta.h>

#include <cstdint>
#include <functional>
#include <optional>

namespace bagua::train {

// A resume at another world size or global batch.
struct Resize {
  int64_t world = 0, global_batch = 0;  // the checkpoint's
  int64_t position = 0;                 // in its epoch's sample order
};

// `global_batch` is this run's; `batch_size` its data.batch_size (the
// checkpoint's global batch when it recorded neither one nor a data plan).
std::optional<Resize> decide_resize(const CheckpointMeta& meta, int world, int64_t global_batch, int64_t batch_size);

// Where the run continues: the checkpoint's position, or after a resize the
// start of its epoch's remaining samples.
TrainingPosition resume_position(const CheckpointMeta& meta, const std::optional<Resize>& resized);

// The schedule's units a resumed run continues with (the checkpoint's; by
// samples once the run changed size), or nothing when it recorded none.
std::optional<ScheduleUnits> resumed_schedule(const CheckpointMeta& meta, bool resized);

struct StepBudgetInput {
  int64_t epochs = 1;
  std::optional<int64_t> max_steps;
  // Variable-size batches (data.sampler.batch_complexity): each epoch has
  // its own count.
  bool variable_batches = false;
  // Batches of epoch e as the sampler counts them (an epoch a resize
  // continues mid-way: what is left of it).
  std::function<int64_t(int64_t epoch)> batches_in_epoch;
  TrainingPosition from;         // where the run starts
  bool changed_size = false;     // resized now, or a schedule by samples
};

struct StepBudget {
  int64_t per_epoch = 0;  // a whole epoch's (the first's, for variable batches)
  int64_t total = 0;      // optimizer steps of the run, resumed ones included
};

StepBudget step_budget(const StepBudgetInput& in);

// The schedule's units once the steps are known: `units` (a resumed run's),
// else this run's first global batch and steps per epoch (none for
// variable batches), with total_steps set (epochs of them, or max_steps).
std::optional<ScheduleUnits> schedule_units(std::optional<ScheduleUnits> units, int64_t global_batch,
                                            int64_t per_epoch, bool variable_batches, int64_t epochs,
                                            std::optional<int64_t> max_steps);

// The point of the learning-rate schedule at `step` (batch `position` of
// `epoch`'s sample order, when the sampler knows it).
double schedule_step(const std::optional<ScheduleUnits>& units, int64_t step, int64_t epoch,
                     std::optional<int64_t> position);

}  // namespace bagua::train
