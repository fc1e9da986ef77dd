// meta.json's type both ways, and the resume decisions and step budget as
// the plain functions the trainer and `bagua plan` share (train/resume.h).
#include <bagua/checkpoint_meta.h>

#include "train/resume.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>

namespace {

using bagua::CheckpointMeta;
using bagua::CheckpointMetaError;
using nlohmann::json;

CheckpointMeta full_meta() {
  CheckpointMeta m;
  m.position = {120, 2, 7, 64};
  m.world_size = 4;
  m.recipe = "r";
  m.algorithm = "bytegrad";
  m.algorithm_kwargs = {{"hierarchical", false}};
  m.optimizers = 2;
  m.has_files = true;
  m.files = {{"model.pt", 1234, "0badf00d"}, {"rank-0.pt", 10, "00000001"}};
  m.data_plan = {{"batch_size", 32}, {"train_samples", 1000}};
  m.global_batch = 128;
  m.epoch_position = 960;
  m.schedule = bagua::ScheduleUnits{64, 16, true, 999};
  m.provenance = {{"bagua", "x"}};
  m.tuned_bucket_bytes = 4096;
  m.keep_best = bagua::BestEvaluation{{bagua::EvalMetric::kEvalAccuracy, bagua::MetricMode::kMax}, 0.8, 96, 2, 3};
  m.early_stop = bagua::BestEvaluation{{bagua::EvalMetric::kEvalLoss, bagua::MetricMode::kMin}};  // none yet
  m.early_stop->evaluations_since = 1;
  return m;
}

TEST(CheckpointMeta, RoundTripsEveryKey) {
  const CheckpointMeta m = full_meta();
  const CheckpointMeta back = bagua::checkpoint_meta_from_json(json::parse(bagua::to_json(m).dump()));
  EXPECT_EQ(back.position.step, 120);
  EXPECT_EQ(back.position.epoch, 2);
  EXPECT_EQ(back.position.batch_in_epoch, 7);
  EXPECT_EQ(back.position.epoch_start, 64);
  EXPECT_EQ(back.world_size, 4);
  EXPECT_EQ(back.algorithm, "bytegrad");
  EXPECT_EQ(back.algorithm_kwargs, m.algorithm_kwargs);
  EXPECT_EQ(back.optimizers, 2);
  ASSERT_TRUE(back.has_files);
  ASSERT_NE(back.file("model.pt"), nullptr);
  EXPECT_EQ(back.file("model.pt")->bytes, 1234u);
  EXPECT_EQ(back.file("model.pt")->crc32, "0badf00d");
  EXPECT_EQ(back.file("optimizer-0.pt"), nullptr);
  EXPECT_EQ(back.data_plan, m.data_plan);
  EXPECT_EQ(back.global_batch, 128);
  EXPECT_EQ(back.epoch_position, 960);
  ASSERT_TRUE(back.schedule);
  EXPECT_EQ(back.schedule->global_batch, 64);
  EXPECT_EQ(back.schedule->steps_per_epoch, 16);
  EXPECT_TRUE(back.schedule->by_samples);
  EXPECT_EQ(back.schedule->total_steps, 0) << "the schedule's length is not saved";
  EXPECT_EQ(back.provenance, m.provenance);
  EXPECT_EQ(back.tuned_bucket_bytes, 4096);
  ASSERT_TRUE(back.keep_best);
  EXPECT_EQ(back.keep_best->goal.metric, bagua::EvalMetric::kEvalAccuracy);
  EXPECT_EQ(back.keep_best->goal.mode, bagua::MetricMode::kMax);
  EXPECT_DOUBLE_EQ(back.keep_best->value, 0.8);
  EXPECT_EQ(back.keep_best->step, 96);
  EXPECT_EQ(back.keep_best->epoch, 2);
  EXPECT_EQ(back.keep_best->evaluations_since, 3);
  ASSERT_TRUE(back.early_stop);
  EXPECT_TRUE(std::isnan(back.early_stop->value)) << "no best yet: null in meta.json";
  EXPECT_EQ(back.early_stop->evaluations_since, 1);
}

// A meta.json of an early version: no epoch_start, files, data, progress,
// provenance nor tuned bucket size.
TEST(CheckpointMeta, ReadsTheOldestShape) {
  const auto m = bagua::parse_checkpoint_meta(
      R"({"step": 5, "epoch": 0, "batch_in_epoch": 5, "world_size": 2, "optimizers": 1, "recipe": "x"})");
  EXPECT_EQ(m.position.step, 5);
  EXPECT_EQ(m.position.epoch_start, 0);
  EXPECT_FALSE(m.has_files);
  EXPECT_TRUE(m.data_plan.is_null());
  EXPECT_FALSE(m.global_batch);
  EXPECT_FALSE(m.schedule);
  EXPECT_TRUE(m.provenance.is_null());
  EXPECT_EQ(m.tuned_bucket_bytes, 0);
  EXPECT_FALSE(m.keep_best);
  EXPECT_FALSE(m.early_stop);
  const json j = bagua::to_json(m);
  EXPECT_FALSE(j.contains("files"));
  EXPECT_FALSE(j.contains("progress"));
  EXPECT_FALSE(j.contains("tuned_bucket_bytes"));
  EXPECT_FALSE(j.contains("best"));
}

TEST(CheckpointMeta, SaysWhichKeyIsWrong) {
  const std::map<std::string, std::string> cases = {
      {"{", "not valid JSON"},
      {"[1]", "not a JSON object"},
      {R"({"step": 1, "epoch": 0, "batch_in_epoch": 1, "world_size": 2})", "no integer 'optimizers'"},
      {R"({"step": "1", "epoch": 0, "batch_in_epoch": 1, "world_size": 2, "optimizers": 1})", "no integer 'step'"},
      {R"({"step": 1, "epoch": 0, "batch_in_epoch": 1, "world_size": 2, "optimizers": 1, "files": [1]})",
       "'files' is not an object"},
      {R"({"step": 1, "epoch": 0, "batch_in_epoch": 1, "world_size": 2, "optimizers": 1,
           "files": {"model.pt": {"bytes": -3, "crc32": "0"}}})",
       "no byte count for model.pt"},
      {R"({"step": 1, "epoch": 0, "batch_in_epoch": 1, "world_size": 2, "optimizers": 1,
           "files": {"model.pt": {"bytes": 3}}})",
       "no CRC-32 for model.pt"},
  };
  for (const auto& [text, says] : cases) {
    try {
      bagua::parse_checkpoint_meta(text);
      ADD_FAILURE() << "accepted " << text;
    } catch (const CheckpointMetaError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

TEST(Resume, SameWorldAndBatchIsNoResize) {
  CheckpointMeta m = full_meta();
  EXPECT_FALSE(bagua::train::decide_resize(m, 4, 128, 32));
}

TEST(Resume, AnotherWorldContinuesFromTheSavedPosition) {
  CheckpointMeta m = full_meta();
  const auto r = bagua::train::decide_resize(m, 2, 64, 32);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->world, 4);
  EXPECT_EQ(r->global_batch, 128);
  EXPECT_EQ(r->position, 960);
  const auto at = bagua::train::resume_position(m, r);
  EXPECT_EQ(at.step, 120);
  EXPECT_EQ(at.epoch, 2);
  EXPECT_EQ(at.batch_in_epoch, 0);
  EXPECT_EQ(at.epoch_start, 960);
  EXPECT_TRUE(bagua::train::resumed_schedule(m, true)->by_samples);
}

// Checkpoints without "progress": whole batches of the data plan's batch
// size times the saved world size.
TEST(Resume, OldCheckpointsCountWholeBatches) {
  CheckpointMeta m = full_meta();
  m.global_batch.reset();
  m.epoch_position.reset();
  m.schedule.reset();
  const auto r = bagua::train::decide_resize(m, 2, 64, 99);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->global_batch, 32 * 4) << "the data plan's batch size, not this recipe's";
  EXPECT_EQ(r->position, 64 + 7 * 128);
  m.data_plan = nullptr;
  EXPECT_EQ(bagua::train::decide_resize(m, 2, 64, 99)->global_batch, 99 * 4);
  m.position.batch_in_epoch = 0;
  m.position.epoch_start = 0;
  EXPECT_EQ(bagua::train::decide_resize(m, 2, 64, 99)->position, 0);
  EXPECT_FALSE(bagua::train::resumed_schedule(m, true));
}

TEST(StepBudget, FreshRunsCountEpochsUpToMaxSteps) {
  bagua::train::StepBudgetInput in;
  in.epochs = 3;
  in.batches_in_epoch = [](int64_t) { return int64_t{10}; };
  auto b = bagua::train::step_budget(in);
  EXPECT_EQ(b.per_epoch, 10);
  EXPECT_EQ(b.total, 30);
  in.max_steps = 25;
  EXPECT_EQ(bagua::train::step_budget(in).total, 25);
  in.max_steps = 1000;
  EXPECT_EQ(bagua::train::step_budget(in).total, 30);
  // Variable-size batches: each epoch its own count.
  in.max_steps.reset();
  in.variable_batches = true;
  in.batches_in_epoch = [](int64_t e) { return 10 + e; };
  b = bagua::train::step_budget(in);
  EXPECT_EQ(b.per_epoch, 10);
  EXPECT_EQ(b.total, 10 + 11 + 12);
}

// A run that changed size: the steps done, what is left of the epoch it
// continues (the sampler's count from the new position), then whole epochs
// at the new size.
TEST(StepBudget, AResizedRunCountsWhatIsLeft) {
  bagua::train::StepBudgetInput in;
  in.epochs = 3;
  in.from = {40, 1, 2, 300};
  in.changed_size = true;
  in.batches_in_epoch = [](int64_t e) { return e == 1 ? int64_t{6} : int64_t{20}; };
  const auto b = bagua::train::step_budget(in);
  EXPECT_EQ(b.per_epoch, 20) << "a whole epoch's, not the continued one's";
  EXPECT_EQ(b.total, 40 + (6 - 2) + 20);
  in.max_steps = 50;
  EXPECT_EQ(bagua::train::step_budget(in).total, 50);
}

TEST(Schedule, FollowsSamplesOnlyOnceResized) {
  auto units = bagua::train::schedule_units(std::nullopt, 64, 16, false, 3, std::nullopt);
  ASSERT_TRUE(units);
  EXPECT_EQ(units->total_steps, 48);
  EXPECT_FALSE(units->by_samples);
  EXPECT_EQ(bagua::train::schedule_step(units, 17, 1, 128), 17.0);
  units->by_samples = true;
  EXPECT_DOUBLE_EQ(bagua::train::schedule_step(units, 17, 1, 128), 16.0 + 2.0);
  EXPECT_EQ(bagua::train::schedule_step(units, 17, 1, std::nullopt), 17.0);
  EXPECT_FALSE(bagua::train::schedule_units(std::nullopt, 64, 16, true, 3, std::nullopt))
      << "variable-size batches have no units";
  EXPECT_EQ(bagua::train::schedule_units(std::nullopt, 64, 16, false, 3, 20)->total_steps, 20);
}

}  // namespace
