// The worker's side of the progress watch (common/progress.h): a thread
// with its own connection to the rendezvous store sends this rank's step
// and phase every second, so the launcher can tell a worker that stopped
// (SIGSTOP, a hung driver, a swapped-out machine) from one that waits for
// it. Setting the step and phase costs two relaxed atomic stores.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace bagua::train {

enum class Phase : int {
  kStarting,
  kData,
  kForward,
  kBackward,  // and the gradient communication it overlaps and waits for
  kOptimizer,
  kCoordination,  // the small per-step agreements: stop votes, metrics
  kCheckpoint,
  kEvaluation,
  kFinishing,
};

const char* phase_name(Phase phase);

class ProgressReporter {
 public:
  // Reports only when BAGUA_PROGRESS_STORE=1 (set by bagua run's launcher,
  // which reads the reports), to MASTER_ADDR:MASTER_PORT under the attempt's
  // prefix; otherwise does nothing.
  ProgressReporter(int rank, int world_size);
  // Sends a last report saying this rank exited on purpose, then stops.
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  void step(int64_t step) { step_.store(step, std::memory_order_relaxed); }
  void phase(Phase phase) { phase_.store(static_cast<int>(phase), std::memory_order_relaxed); }
  // This rank's training diverged: its first non-finite step was computed
  // at `unix_ms` (common/progress.h). Sent at once, and in every report
  // after, the last included.
  void diverged(int64_t unix_ms);

 private:
  void loop();

  const int rank_, world_size_;
  std::atomic<int64_t> step_{0};
  std::atomic<int> phase_{static_cast<int>(Phase::kStarting)};
  std::atomic<int64_t> diverged_ms_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace bagua::train
