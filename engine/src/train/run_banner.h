// The first lines the user reads of a run (rank 0): what trains where, the
// data, the sampler, the steps, the output; and, for a resumed run, where it
// resumed, what is done again, and what a resize changed (with its
// metrics.jsonl resume record). Facts in, lines out: nothing here decides.
#pragma once

#include <bagua/checkpoint_meta.h>

#include "train/resume.h"
#include "train/run_log.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bagua::train {

struct RunBanner {
  std::string recipe, algorithm, backend;
  std::string hierarchy;  // hierarchical_choice(): "hierarchical: auto (flat on one node)"; empty: no such key
  int world = 1;
  std::string device;  // "CPUs", or "GPUs (rank 0 on cuda:0)"
  std::string train_data, eval_data, sampler;  // described; eval_data empty: none
  std::string loader;  // "2 loader threads, ..." when batches load ahead of the step; empty: none
  std::string step;    // precision, micro-batches, clipping when not the defaults; empty: none
  std::string out_dir;
  int64_t per_epoch = 0, total = 0;
  // Variable-size batches (data.sampler.batch_complexity) of up to
  // batch_size samples, samples_per_worker each epoch; else the global
  // batch and whether train.global_batch_size set it.
  std::optional<int64_t> batch_complexity;
  int64_t batch_size = 0, samples_per_worker = 0, global_batch = 0;
  bool global_batch_given = false;
  std::vector<std::string> unassigned;  // parameters in no optimizer
};

// Lines of at most 100 columns where they can be cut (after ", " or "; ").
void say_run_banner(RunLog& log, const RunBanner& banner);

struct ResumeFacts {
  std::string from;           // the checkpoint
  TrainingPosition at;        // where the run continues
  int64_t logged_before = 0;  // the last step metrics.jsonl had
  int world = 1;
  int64_t global_batch = 0;   // this run's
  bool global_batch_given = false;
  std::optional<Resize> resized;
  bool schedule_by_samples = false;
  int64_t train_samples = 0;
  std::string algorithm;
  bool per_rank_model = false;
  // train.grad_accum_steps: this run's micro-batches per step, the recipe's
  // when a resize changed them to keep the global batch (else 0), and
  // data.batch_size.
  int64_t accum = 1, accum_before = 0, batch_size = 0;
  // A schedule over the whole run ("cosine", "linear"; empty: another):
  // its length in the run before (0: not recorded) and in this one.
  std::string schedule;
  int64_t schedule_steps_before = 0, schedule_steps = 0;
};

// The lines and the resume record (metrics.jsonl).
void say_resumed(RunLog& log, const ResumeFacts& facts);

}  // namespace bagua::train
