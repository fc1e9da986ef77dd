#include "train/progress_reporter.h"

#include "comm/c10d_compat.h"
#include "common/progress.h"

#include <cstdlib>

namespace bagua::train {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kStarting: return "start-up";
    case Phase::kData: return "data loading";
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward and gradient communication";
    case Phase::kOptimizer: return "optimizer step";
    case Phase::kCoordination: return "coordination";
    case Phase::kCheckpoint: return "checkpoint";
    case Phase::kEvaluation: return "evaluation";
    case Phase::kFinishing: return "finishing";
  }
  return "?";
}

ProgressReporter::ProgressReporter(int rank, int world_size) : rank_(rank), world_size_(world_size) {
  const char* on = std::getenv("BAGUA_PROGRESS_STORE");
  if (on == nullptr || std::string(on) != "1") return;
  thread_ = std::thread([this] { loop(); });
}

ProgressReporter::~ProgressReporter() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void ProgressReporter::diverged(int64_t unix_ms) {
  diverged_ms_.store(unix_ms, std::memory_order_relaxed);
  wake_.notify_all();
}

void ProgressReporter::loop() {
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  // A one-node run: a file of this rank's next to the store file.
  const std::string store_file = comm::store_file_from_env();
  if (store_file.empty() && (addr == nullptr || port == nullptr)) return;
  const std::string prefix = comm::rendezvous_scope();
  const std::string key = progress::rank_key(rank_);
  const std::string file = store_file.empty() ? "" : progress::report_file(store_file, prefix, rank_);
  comm::StorePtr store;
  progress::Report report;
  auto sent_at = std::chrono::steady_clock::now();
  // Looks ten times a second; sends when the step or phase changed (so a
  // report is at most 0.1 s stale when the process freezes) and at least
  // once a second (the heartbeat).
  for (bool last = false; !last;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (report.beat > 0) {
        wake_.wait_for(lock, std::chrono::milliseconds(100), [&] {
          return quit_ || diverged_ms_.load(std::memory_order_relaxed) != report.diverged_ms;
        });
      }
      last = quit_;
    }
    const int64_t step = step_.load(std::memory_order_relaxed);
    const int64_t collectives = comm::collectives_started();
    const char* phase = last ? progress::kExitedPhase
                             : phase_name(static_cast<Phase>(phase_.load(std::memory_order_relaxed)));
    const int64_t diverged = diverged_ms_.load(std::memory_order_relaxed);
    const auto now = std::chrono::steady_clock::now();
    if (report.beat > 0 && step == report.step && report.phase == phase && diverged == report.diverged_ms &&
        now - sent_at < std::chrono::seconds(1)) {
      continue;
    }
    sent_at = now;
    ++report.beat;
    report.step = step;
    report.collectives = collectives;
    report.diverged_ms = diverged;
    report.phase = phase;
    if (!file.empty()) {
      progress::write_report_file(file, report);  // a failed write: the next one tries again
      continue;
    }
    try {
      if (!store) {
        store = comm::make_tcp_store(addr, std::atoi(port), false, world_size_, std::chrono::seconds(5));
        if (!prefix.empty()) store = comm::make_prefix_store(prefix, store);
      }
      store->set(key, progress::encode(report));
    } catch (const std::exception&) {
      store.reset();  // the store went away (the launcher is ending): try again next time
    }
  }
}

}  // namespace bagua::train
