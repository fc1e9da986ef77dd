// The training run a recipe describes, as one worker executes it (the
// checks `bagua run` makes before it starts any worker: bagua/preflight.h).
//
// run_worker() joins the process group (torchrun's variables must be set),
// loads the TorchScript model and the data, builds the optimizers, the
// schedule and the algorithm, resumes from the latest checkpoint when asked,
// trains, evaluates across all ranks, writes OUTPUT/metrics.jsonl,
// checkpoints and, on rank 0, OUTPUT/model.pt. SIGINT/SIGTERM make every
// rank stop at the same step boundary after a final checkpoint.
#pragma once

#include <bagua/recipe.h>

#include <optional>
#include <string>

namespace bagua {

struct TrainOutcome {
  int64_t steps = 0;                    // optimizer steps done in all (resumed ones included)
  int64_t epochs_completed = 0;
  double last_loss = 0;                 // mean over ranks, last logged window
  std::optional<double> eval_loss;      // last evaluation, if any
  std::optional<double> eval_accuracy;  // classification only
  bool stopped = false;                 // stopped early by a signal (a checkpoint was written)
  int stop_signal = 0;                  // the signal this worker got (0: a peer's, through the stop vote)
  std::string resumed_from;             // the checkpoint resumed from, if any
  std::string early_stop;               // why train.early_stop ended the run; empty: it did not
};

TrainOutcome run_worker(const Recipe& recipe);

}  // namespace bagua
