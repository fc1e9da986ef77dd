// AsyncModelAverage: asynchronous model averaging (Bagua's
// AsyncModelAverageAlgorithm).
//
// For the first `warmup_steps` steps: gradient_allreduce (averaged
// gradients, during backward). From then on each rank trains at its own
// pace, and a background thread, over a process group of its own, averages
// the weights with every rank every `sync_interval_ms`:
//   1. the ranks agree whether to go on (an allreduce of "abort requested":
//      the loop ends only when every rank has asked, so none is left waiting
//      on a peer that stopped);
//   2. a snapshot s of the weights, taken between two training steps;
//   3. r = allreduce-sum of the snapshots;
//   4. between two training steps again: x += r / n - s (the average of the
//      snapshots plus the progress this rank made since its snapshot, not an
//      overwrite of it).
// "Between two training steps": the thread never touches the weights from a
// rank's forward-pre hook to the end of its optimizer step (Bagua locks
// from forward to the end of backward; on the CPU the optimizer's in-place
// update must be covered too).
//
// abort(module) stops the averaging: it returns once every rank has called
// it (its thread keeps averaging until then), so call it on every rank, as
// Bagua requires, e.g. after training. resume(module) starts it again. Both
// may be called repeatedly; resume() before the warm-up has ended does
// nothing (the averaging starts at the first step after it). The module's
// destruction and switch_algorithm abort it too.
#pragma once

#include <bagua/algorithms/algorithm.h>

#include <string>

namespace bagua {

class BaguaModule;  // bagua/distributed.h

class AsyncModelAverage : public KeywordAlgorithm {
 public:
  // Throws InvalidArgument for a mode other than "all", an interval < 1 ms
  // or warmup_steps < 0.
  explicit AsyncModelAverage(std::string peer_selection_mode = "all", int64_t sync_interval_ms = 500,
                             int64_t warmup_steps = 0);
  std::unique_ptr<AlgorithmImpl> reify(ProcessGroupPtr group) const override;

  // Bagua's abort and resume, for a module wrapped with this algorithm
  // (InvalidArgument otherwise). Collective over the module's group.
  void abort(BaguaModule& module) const;
  void resume(BaguaModule& module) const;

  int64_t sync_interval_ms() const { return kwarg<int64_t>("sync_interval_ms"); }
  int64_t warmup_steps() const { return kwarg<int64_t>("warmup_steps"); }
};

// Bagua's class name.
using AsyncModelAverageAlgorithm = AsyncModelAverage;

}  // namespace bagua
