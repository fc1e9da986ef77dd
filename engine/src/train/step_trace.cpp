// StepTrace: see step_trace.h. The file follows the Trace Event Format:
// {"traceEvents": [...], "displayTimeUnit": "ms"}, "X" events for spans
// (ts and dur in microseconds), "i" for instants, "M" for the process and
// thread names; pid is the rank.
#include "train/step_trace.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace bagua::train {

StepTrace::StepTrace(int rank, int64_t first_step, int64_t steps, std::string path)
    : enabled_(steps > 0), rank_(rank), first_(first_step), last_(first_step + steps - 1), path_(std::move(path)) {}

StepTrace::~StepTrace() {
  try {
    write();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bagua: could not write the trace %s: %s\n", path_.c_str(), e.what());
  }
}

int StepTrace::tid_locked(const char* role) {
  auto [it, added] = tids_.emplace(std::this_thread::get_id(), static_cast<int>(tids_.size()) + 1);
  if (added) thread_names_[it->second] = role;
  return it->second;
}

void StepTrace::begin_step(int64_t step) {
  if (!enabled_ || step < first_ || step > last_ || written_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  tid_locked("training");
  step_ = step;
  step_open_ = true;
  step_begin_ = Clock::now();
  active_ = true;
}

void StepTrace::close_phase_locked(Clock::time_point now) {
  if (!phase_open_) return;
  events_.push_back({phase_name_, "phase", 'X', us(phase_begin_), us(now) - us(phase_begin_),
                     tid_locked("training"), step_});
  phase_open_ = false;
}

void StepTrace::phase(const std::string& name) {
  if (!active_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!step_open_) return;
  const auto now = Clock::now();
  close_phase_locked(now);
  phase_open_ = true;
  phase_name_ = name;
  phase_begin_ = now;
}

void StepTrace::end_step() {
  if (!active_) return;
  bool window_done = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!step_open_) return;
    const auto now = Clock::now();
    close_phase_locked(now);
    events_.push_back({"step " + std::to_string(step_.load()), "step", 'X', us(step_begin_),
                       us(now) - us(step_begin_), tid_locked("training"), step_});
    step_open_ = false;
    window_done = step_ >= last_;
    if (window_done) active_ = false;
  }
  if (window_done) write();
}

void StepTrace::on_module_event(const TraceEvent& e) {
  if (!active_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  switch (e.kind) {
    case TraceEvent::kGradientReady:
      events_.push_back({"gradient ready: " + e.name, "gradient", 'i', us(e.time), 0, tid_locked("autograd"), step_});
      break;
    case TraceEvent::kBucketLaunched:
      launched_[e.name] = e.time;
      events_.push_back({"launch " + e.name, "bucket", 'i', us(e.time), 0, tid_locked("autograd"), step_});
      break;
    case TraceEvent::kBucketCommStart:
      comm_begin_[e.name] = e.time;
      tid_locked("communication");
      break;
    case TraceEvent::kBucketCommEnd: {
      auto begin = comm_begin_.find(e.name);
      if (begin == comm_begin_.end()) break;  // began before the window
      Event span{"communicate " + e.name, "communication", 'X', us(begin->second), us(e.time) - us(begin->second),
                 tid_locked("communication"), step_};
      span.bytes = e.bytes;
      auto launched = launched_.find(e.name);
      if (launched != launched_.end()) span.queued_us = us(begin->second) - us(launched->second);
      events_.push_back(span);
      comm_begin_.erase(begin);
      break;
    }
    case TraceEvent::kPostBackward:
      events_.push_back({"backward done", "phase", 'i', us(e.time), 0, tid_locked("autograd"), step_});
      break;
    case TraceEvent::kWaitBegin:
      wait_begin_[std::this_thread::get_id()] = e.time;
      break;
    case TraceEvent::kWaitEnd: {
      auto begin = wait_begin_.find(std::this_thread::get_id());
      if (begin == wait_begin_.end()) break;
      events_.push_back({"wait for communication", "wait", 'X', us(begin->second),
                         us(e.time) - us(begin->second), tid_locked("training"), step_});
      wait_begin_.erase(begin);
      break;
    }
  }
}

std::string StepTrace::write() {
  if (!enabled_) return "";
  std::lock_guard<std::mutex> lock(mutex_);
  if (written_ || events_.empty()) return "";
  written_ = true;
  active_ = false;
  const auto now = Clock::now();
  close_phase_locked(now);
  if (step_open_) {
    events_.push_back({"step " + std::to_string(step_.load()) + " (unfinished)", "step", 'X', us(step_begin_),
                       us(now) - us(step_begin_), tid_locked("training"), step_});
  }
  nlohmann::json list = nlohmann::json::array();
  list.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"name", "rank " + std::to_string(rank_)}}}});
  list.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"sort_index", rank_}}}});
  for (const auto& [tid, name] : thread_names_) {
    list.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", tid}, {"args", {{"name", name}}}});
  }
  for (const auto& e : events_) {
    nlohmann::json j = {{"name", e.name}, {"cat", e.category}, {"ph", std::string(1, e.ph)}, {"ts", e.ts_us},
                        {"pid", rank_}, {"tid", e.tid}};
    nlohmann::json args = {{"step", e.step}};
    if (e.ph == 'X') j["dur"] = e.dur_us;
    if (e.ph == 'i') j["s"] = "t";
    if (e.bytes >= 0) args["bytes"] = e.bytes;
    if (e.queued_us >= 0) args["queued_us"] = e.queued_us;
    j["args"] = args;
    list.push_back(std::move(j));
  }
  nlohmann::json doc = {{"traceEvents", list}, {"displayTimeUnit", "ms"}};
  std::filesystem::path p(path_);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp);
    out << doc.dump() << "\n";
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, p);
  return path_;
}

}  // namespace bagua::train
