#include "train/resume.h"

#include <algorithm>

namespace bagua::train {

std::optional<Resize> decide_resize(const CheckpointMeta& meta, int world, int64_t global_batch, int64_t batch_size) {
  int64_t saved_global = meta.global_batch.value_or(0);
  if (saved_global <= 0) saved_global = data_plan_batch_size(meta.data_plan, batch_size) * meta.world_size;
  if (meta.world_size == world && saved_global == global_batch) return std::nullopt;
  Resize r{meta.world_size, saved_global, 0};
  const TrainingPosition& at = meta.position;
  // Every batch before the last is whole.
  r.position = meta.epoch_position.value_or(at.epoch_start + at.batch_in_epoch * saved_global);
  if (at.batch_in_epoch == 0 && at.epoch_start == 0) r.position = 0;
  return r;
}

TrainingPosition resume_position(const CheckpointMeta& meta, const std::optional<Resize>& resized) {
  if (!resized) return meta.position;
  return {meta.position.step, meta.position.epoch, 0, resized->position};
}

std::optional<ScheduleUnits> resumed_schedule(const CheckpointMeta& meta, bool resized) {
  std::optional<ScheduleUnits> units = meta.schedule;
  if (units && resized) units->by_samples = true;
  return units;
}

StepBudget step_budget(const StepBudgetInput& in) {
  StepBudget b;
  // (An epoch a resize continues mid-way is shorter: per_epoch is a whole one's.)
  b.per_epoch = in.batches_in_epoch(in.from.epoch_start > 0 ? in.from.epoch + 1 : 0);
  auto capped = [&] { return in.max_steps && b.total >= *in.max_steps; };
  if (in.changed_size) {
    // The steps done, then what is left at this size.
    b.total = in.from.step;
    for (int64_t e = in.from.epoch; e < in.epochs && !capped(); ++e) {
      b.total += e == in.from.epoch ? in.batches_in_epoch(e) - in.from.batch_in_epoch
                                    : in.variable_batches ? in.batches_in_epoch(e) : b.per_epoch;
    }
  } else {
    for (int64_t e = 0; e < in.epochs && !capped(); ++e) {
      b.total += in.variable_batches ? in.batches_in_epoch(e) : b.per_epoch;
    }
  }
  if (in.max_steps) b.total = std::min(b.total, *in.max_steps);
  return b;
}

std::optional<ScheduleUnits> schedule_units(std::optional<ScheduleUnits> units, int64_t global_batch,
                                            int64_t per_epoch, bool variable_batches, int64_t epochs,
                                            std::optional<int64_t> max_steps) {
  if (!units && !variable_batches) units = ScheduleUnits{global_batch, per_epoch, false, 0};
  if (units) {
    units->total_steps = units->steps_per_epoch * epochs;
    if (max_steps) units->total_steps = std::min(units->total_steps, *max_steps);
  }
  return units;
}

double schedule_step(const std::optional<ScheduleUnits>& units, int64_t step, int64_t epoch,
                     std::optional<int64_t> position) {
  if (!units || !units->by_samples || units->global_batch <= 0 || !position) return static_cast<double>(step);
  return static_cast<double>(epoch * units->steps_per_epoch) +
         static_cast<double>(*position) / static_cast<double>(units->global_batch);
}

}  // namespace bagua::train
