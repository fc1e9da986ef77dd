// The per-step trace of `bagua run --trace` (output.trace): per rank, a
// Chrome trace JSON file (the Trace Event Format that PyTorch's profiler
// exports; opens in Perfetto and chrome://tracing) of a window of steps,
// with spans for each step's phases (control traffic, data, forward,
// backward, waiting for communication, optimizer, metrics), each bucket's
// communication on the communication thread (bytes, time queued), and an
// instant per gradient that became ready. Outside its window, and when it is
// off, every call returns at once.
#pragma once

#include <bagua/distributed.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace bagua::train {

class StepTrace {
 public:
  StepTrace() = default;  // off
  // Records steps first_step .. first_step + steps - 1 (numbered from 1, as
  // metrics.jsonl counts them) and writes `path` when the window closes, or
  // at write() / destruction if it never did.
  StepTrace(int rank, int64_t first_step, int64_t steps, std::string path);
  ~StepTrace();
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;

  bool enabled() const { return enabled_; }
  // The training thread: a step starts (its number, from 1), a phase inside
  // it starts (closing the previous phase), the step ends.
  void begin_step(int64_t step);
  void phase(const std::string& name);
  void end_step();
  // From the module (any thread): buckets launched, communicated, waited for.
  void on_module_event(const TraceEvent& event);
  // Writes what was recorded, once (open spans are closed now). Returns the
  // path written, or "" when nothing was.
  std::string write();

 private:
  using Clock = std::chrono::steady_clock;
  struct Event {
    std::string name, category;
    char ph;  // 'X' complete span, 'i' instant
    double ts_us, dur_us;
    int tid;
    int64_t step;
    int64_t bytes = -1;
    double queued_us = -1;
  };
  double us(Clock::time_point t) const { return std::chrono::duration<double, std::micro>(t - base_).count(); }
  int tid_locked(const char* role);  // the calling thread's id in the trace
  void close_phase_locked(Clock::time_point now);

  bool enabled_ = false;
  int rank_ = 0;
  int64_t first_ = 0, last_ = 0;
  std::string path_;
  Clock::time_point base_ = Clock::now();
  std::atomic<bool> active_{false};
  std::atomic<int64_t> step_{0};
  bool written_ = false;

  std::mutex mutex_;
  std::vector<Event> events_;
  std::map<std::thread::id, int> tids_;
  std::map<int, std::string> thread_names_;
  // The open step and phase spans of the training thread.
  bool step_open_ = false, phase_open_ = false;
  Clock::time_point step_begin_, phase_begin_;
  std::string phase_name_;
  // Per bucket: when it was launched and when its communication began.
  std::map<std::string, Clock::time_point> launched_, comm_begin_;
  std::map<std::thread::id, Clock::time_point> wait_begin_;
};

}  // namespace bagua::train
