// The launcher's side of the progress watch (see LaunchOptions::watch_progress
// and common/progress.h): a thread that reads every rank's reports from the
// rendezvous store once a second and decides, without ever blocking the
// supervisor, whether a rank has stalled, and whether another node failed.
#pragma once

#include <bagua/launch.h>

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

  // Tells the other nodes' launchers that this node failed.
  void publish_failure(const std::string& text);

 private:
  struct RankState {
    bool seen = false;
    int64_t beat = -1, step = -1;
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
  std::map<int, RankState> ranks_;
  std::optional<Stop> stop_;
  bool stop_taken_ = false;
  std::string pending_failure_;
  std::chrono::steady_clock::time_point last_warning_{};
  std::thread thread_;
};

}  // namespace bagua::launch
