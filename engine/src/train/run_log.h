// What rank 0 tells the user about a run: OUTPUT/metrics.jsonl (one JSON
// object per logged step or evaluation, bagua/metrics.h's records; the
// fields are documented in docs/metrics.md and stable) and progress: a bar with rate and ETA redrawn in
// place on the terminal, or plain periodic lines on stderr (CI logs).
//
// A worker's stderr is a pipe to `bagua run`, which forwards whole lines, so
// the bar goes straight to /dev/tty when the launcher says its own stderr is
// a terminal (BAGUA_PROGRESS=tty), or to stderr when that is a terminal.
#pragma once

#include <bagua/metrics.h>

#include "train/tensorboard_writer.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bagua::train {

// The records are bagua/metrics.h's.
using metrics::EvalRecord;
using metrics::StepRecord;

class RunLog {
 public:
  // `enabled` is false on every rank but 0: then every call does nothing.
  // `start_step`: the step this run starts at (after a resume), so rates and
  // ETAs count only the steps done here.
  // With `append` (a resumed run), the file's earlier records are read
  // once: the best evaluation up to `start_step` counts in summary(), and
  // logged_before() is the step of its last step or resume record.
  RunLog(const std::string& metrics_path, bool enabled, int64_t total_steps, bool append, int64_t start_step = 0);
  // The last step the metrics file had before this run appended to it (0
  // when none, when it could not be read, or on a rank that does not log).
  int64_t logged_before() const { return logged_before_; }
  void step(const StepRecord& r);
  void eval(const EvalRecord& r);
  // Also writes each step and eval record as TensorBoard scalars to a new
  // event file in `dir` (train/tensorboard_writer.h). Throws bagua::Error
  // when the file cannot be created; a later failed write only warns and
  // stops the event file.
  void add_tensorboard(const std::string& dir);
  // Any other record (a resume, the bucket autotune's choice, the peak
  // memory): one line of metrics.jsonl.
  void record(const metrics::Record& record);
  // Progress between records (terminal only): redraws the bar.
  void tick(int64_t step, int64_t epoch);
  // A line for the user (ends any bar first).
  void say(const std::string& line);
  // The run's summary at `step`: "done: 24 steps in 3s, final loss 0.6312,
  // eval accuracy 78.10% (best 78.40% at step 16), 9120 samples/s" (the
  // parts it has records for; a resumed run adds the steps it did itself).
  std::string summary(int64_t step) const;
  double elapsed() const;
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

 private:
  void draw(int64_t step, int64_t epoch, double rate);
  void write_line(const metrics::Record& record);
  void note_best(const EvalRecord& r);
  void write_tensorboard(int64_t step, const Scalars& values);
  bool enabled_;
  std::FILE* bar_ = nullptr;  // where the bar is drawn; null: plain lines
  bool own_bar_ = false;      // bar_ is /dev/tty, opened here
  int64_t total_steps_;
  int64_t start_step_;
  std::ofstream metrics_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // null unless add_tensorboard()
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  double last_rate_ = 0;  // steps per second
  double last_loss_ = 0;
  bool bar_on_screen_ = false;
  // For summary(): samples and time over the step records, the evaluations.
  double samples_ = 0, last_time_ = 0;
  int64_t last_step_ = 0;
  int64_t logged_before_ = 0;
  std::optional<metrics::EvalRecord> last_eval_, best_eval_;
};

}  // namespace bagua::train
