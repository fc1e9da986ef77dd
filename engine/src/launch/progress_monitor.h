// The launcher's side of the progress watch (see LaunchOptions::watch_progress
// and common/progress.h): a thread that reads every rank's reports from the
// rendezvous store once a second and decides, without ever blocking the
// supervisor, whether a rank has stalled, and whether another node failed.
#pragma once

#include <bagua/launch.h>

#include "comm/c10d_compat.h"

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace bagua::launch {

class ProgressMonitor {
 public:
  // Watches the `world_size` ranks of attempt `attempt` through the store
  // at addr:port. Starts its thread at once; connecting may take a while
  // (the store of node 0 may not be up yet) and is retried.
  ProgressMonitor(const LaunchOptions& options, int port, int world_size, const std::string& attempt);
  ~ProgressMonitor();
  ProgressMonitor(const ProgressMonitor&) = delete;
  ProgressMonitor& operator=(const ProgressMonitor&) = delete;

  struct Stop {
    std::string stall;           // set when a stalled rank stops the job
    std::string remote_failure;  // set when another node failed
    std::vector<int> kill;       // global ranks to kill at once (the stalled one)
  };
  // What should stop this node's workers, once; never blocks.
  std::optional<Stop> take_stop();

  // A rank (not in `exited`) that has sent no report for a few seconds and
  // that in words: the likely cause of a failure that just happened.
  std::optional<std::pair<int, std::string>> silent_rank(const std::set<int>& exited) const;

  // True while no rank has reported a phase past start-up (or anything at
  // all): the workers hold no training to save yet.
  bool still_starting() const;

  // Tells the other nodes' launchers that this node failed.
  void publish_failure(const std::string& text);

  // After publish_failure(): another node's failure published before this
  // one ("node 1: rank 3 failed with ..."), or "". Failures are numbered in
  // the store as they are published, so of two nodes failing together (a
  // worker killed on one, its peers on the other losing their connections)
  // each learns which came first. Waits at most `wait` for the store.
  std::string earlier_remote_failure(std::chrono::milliseconds wait);

  // The ranks whose training diverged, by when their first non-finite step
  // ran (Unix ms; common/progress.h), after a fresh poll of the store
  // (waiting at most `wait` for it).
  std::map<int, int64_t> diverged_ranks(std::chrono::milliseconds wait);

 private:
  struct RankState {
    bool seen = false;
    int64_t beat = -1, step = -1, collectives = -1, diverged_ms = 0;
    std::string phase;
    std::chrono::steady_clock::time_point last_beat, last_progress;
  };

  struct Connection;  // the store client, used by the thread only

  void loop();
  void poll_once(Connection& connection);  // throws when the store is unreachable
  std::string describe(int rank, std::chrono::steady_clock::time_point now) const;  // needs mutex_
  void check_stalls(std::chrono::steady_clock::time_point now);                    // needs mutex_
  void say(const std::string& line) const;

  const LaunchOptions options_;
  const int port_, world_size_;
  const std::string prefix_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool quit_ = false;
  bool poll_now_ = false;  // earlier_remote_failure() waits for a fresh poll
  int64_t polls_ = 0;      // polls done (a fresh one has a higher number)
  std::condition_variable polled_;
  int64_t my_failure_order_ = 0;      // this node's failure's number, once published
  std::string first_remote_failure_;  // the other nodes' lowest-numbered failure
  int64_t first_remote_order_ = 0;
  std::map<int, RankState> ranks_;
  std::optional<Stop> stop_;
  bool stop_taken_ = false;
  std::string pending_failure_;
  std::chrono::steady_clock::time_point last_warning_{};
  std::thread thread_;
};

}  // namespace bagua::launch

namespace bagua {

// The key every RendezvousServer sets, so that a client can tell one of
// bagua's stores from another process listening on the port.
inline constexpr const char* kBaguaStoreKey = "bagua/store";

// Whether `store` (a client) answers as a RendezvousServer within `within`:
// false when its key is missing or no TCPStore answer comes.
bool is_bagua_store(const comm::StorePtr& store, std::chrono::seconds within);

}  // namespace bagua
