#include "train/run_banner.h"

#include <bagua/metrics.h>

#include <cstdlib>
#include <filesystem>

namespace bagua::train {

namespace {

constexpr size_t kColumns = 100;

// `line` cut after ", " or "; " so each piece fits kColumns where it can,
// the pieces after the first indented by two spaces.
std::vector<std::string> fitted(const std::string& line) {
  std::vector<std::string> out;
  std::string rest = line;
  std::string indent;
  while (indent.size() + rest.size() > kColumns) {
    const size_t room = kColumns - indent.size();
    size_t cut = std::string::npos;
    for (size_t i = rest.find_first_of(",;"); i != std::string::npos && i + 1 < room;
         i = rest.find_first_of(",;", i + 1)) {
      if (rest[i + 1] == ' ') cut = i + 1;
    }
    if (cut == std::string::npos) break;  // a path longer than a line: left whole
    out.push_back(indent + rest.substr(0, cut));
    rest = rest.substr(cut + 1);
    indent = "  ";
  }
  out.push_back(indent + rest);
  return out;
}

void say_fitted(RunLog& log, const std::string& line) {
  for (const auto& piece : fitted(line)) log.say(piece);
}

}  // namespace

void say_run_banner(RunLog& log, const RunBanner& b) {
  say_fitted(log, "bagua run " + b.recipe + ": " + std::to_string(b.world) + " workers on " + b.device + " over " +
                      b.backend);
  say_fitted(log, "algorithm: " + b.algorithm + (b.hierarchy.empty() ? "" : ", " + b.hierarchy));
  say_fitted(log, "train: " + b.train_data);
  if (!b.eval_data.empty()) say_fitted(log, "eval: " + b.eval_data);
  say_fitted(log, "sampler: " + b.sampler);
  if (!b.loader.empty()) say_fitted(log, "loader: " + b.loader);
  if (!b.step.empty()) say_fitted(log, "step: " + b.step);
  if (b.batch_complexity) {
    say_fitted(log, std::to_string(b.per_epoch) + " steps in the first epoch (batches of up to " +
                        std::to_string(b.batch_size) + " samples within " + std::to_string(*b.batch_complexity) +
                        " complexity, " + std::to_string(b.samples_per_worker) + " samples per worker), " +
                        std::to_string(b.total) + " steps in all");
  } else {
    const int64_t per = b.global_batch / b.world;
    std::string per_worker = b.global_batch % b.world == 0
                                 ? "batch " + std::to_string(per) + " per worker"
                                 : "batch " + std::to_string(per) + " or " + std::to_string(per + 1) + " per worker";
    if (b.global_batch_given) per_worker += " (train.global_batch_size " + std::to_string(b.global_batch) + ")";
    say_fitted(log, std::to_string(b.per_epoch) + " steps per epoch of " + per_worker + ", " + std::to_string(b.total) +
                        " steps in all");
  }
  log.say("output: " + b.out_dir);
  for (const auto& name : b.unassigned) log.say("note: parameter " + name + " is in no optimizer: it stays fixed");
}

namespace {

// What a resize changed, said once.
void say_resize(RunLog& log, const ResumeFacts& f, metrics::ResumeRecord& record) {
  const Resize& r = *f.resized;
  record.previous_world_size = r.world;
  record.world_size = f.world;
  record.previous_global_batch = r.global_batch;
  record.global_batch = f.global_batch;
  record.epoch = f.at.epoch + 1;
  record.epoch_position = f.at.epoch_start;
  log.say("resized: " + std::to_string(r.world) + " workers -> " + std::to_string(f.world) + ", global batch " +
          std::to_string(r.global_batch) + " -> " + std::to_string(f.global_batch) + "; epoch " +
          std::to_string(f.at.epoch + 1) + " continues after its first " + std::to_string(f.at.epoch_start) +
          " of " + std::to_string(f.train_samples) + " samples" +
          (f.schedule_by_samples ? "; the learning-rate schedule follows the samples seen" : ""));
  if (f.accum_before > 0) {
    log.say("train.grad_accum_steps " + std::to_string(f.accum_before) + " -> " + std::to_string(f.accum) +
            " keeps the global batch " + std::to_string(f.global_batch) + " (data.batch_size " +
            std::to_string(f.batch_size) + " x " + std::to_string(f.world) + " worker" + (f.world == 1 ? "" : "s") +
            " x " + std::to_string(f.accum) + " micro-batches)");
  }
  if (r.global_batch != f.global_batch && f.accum > 1) {
    log.say("note: the global batch changed with the world size: " + std::to_string(r.global_batch) +
            " is not a multiple of data.batch_size x workers (" + std::to_string(f.batch_size) + " x " +
            std::to_string(f.world) + "), so train.grad_accum_steps could not keep it");
  } else if (r.global_batch != f.global_batch && !f.global_batch_given) {
    log.say("note: the global batch changed with the world size (data.batch_size stays per worker); "
            "set train.global_batch_size to keep it");
  }
  if (f.per_rank_model) {
    log.say("note: " + f.algorithm + " keeps one model per worker: after a resize every worker "
            "starts from the workers' average (the checkpoint's model.pt) with rank 0's optimizer state and "
            "fresh algorithm state");
  }
}

}  // namespace

void say_resumed(RunLog& log, const ResumeFacts& f) {
  log.say("resumed from " + f.from + " at step " + std::to_string(f.at.step));
  metrics::ResumeRecord record{f.at.step, f.from};
  if (const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT")) record.restart = std::atoll(restart);
  if (f.logged_before > f.at.step) {
    record.redone_steps = f.logged_before - f.at.step;
    record.redone_samples = record.redone_steps * (f.resized ? f.resized->global_batch : f.global_batch);
    log.say("the run before had logged step " + std::to_string(f.logged_before) + ": " +
            std::to_string(record.redone_steps) + (record.redone_steps == 1 ? " step" : " steps") + " (" +
            std::to_string(record.redone_samples) + " samples) after the checkpoint " +
            (record.redone_steps == 1 ? "is" : "are") + " done again");
  }
  if (record.restart > 0 || f.resized) {
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    if (local && std::atoll(local) > 0) record.nodes = (f.world + std::atoll(local) - 1) / std::atoll(local);
  }
  if (f.resized) say_resize(log, f, record);
  // train.epochs or max_steps changed: the rate follows the new length's
  // curve from here (higher again, after a run that had decayed it).
  if (!f.schedule.empty() && f.schedule_steps_before > 0 && f.schedule_steps != f.schedule_steps_before) {
    log.say("note: the " + f.schedule + " learning-rate schedule now spans " + std::to_string(f.schedule_steps) +
            " steps, not the " + std::to_string(f.schedule_steps_before) +
            " of the run before (train.epochs or train.max_steps changed): from step " + std::to_string(f.at.step) +
            " the rate follows the new length's curve; set scheduler.total_steps to keep one schedule across runs");
  }
  log.record(record);
}

}  // namespace bagua::train
