// One rank's output on its way out: bytes from its stdout/stderr pipes are cut
// into whole lines, and each line goes, in one write, to the terminal (with
// the "[rank N] " prefix when asked), to the rank's log file, and into a
// bounded tail kept for the failure report.
//
// Lines are written whole and by one thread, so lines of different ranks
// never interleave mid-line. A line longer than kMaxLine bytes is cut there.
#pragma once

#include "common/unique_fd.h"

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

namespace bagua::launch {

enum class Stream { kStdout = 0, kStderr = 1 };

struct OutputSinks {
  int stdout_fd = -1;  // terminal for the worker's stdout lines; -1: do not echo
  int stderr_fd = -1;  // terminal for its stderr lines; -1: do not echo
  std::string prefix;  // put before every echoed line ("" for none)
  UniqueFd log;        // the rank's log file, or invalid
  size_t tail_lines = 0;
};

class RankOutput {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  explicit RankOutput(OutputSinks sinks) : sinks_(std::move(sinks)) {}

  // Bytes read from the worker's pipe for `stream`.
  void feed(Stream stream, const char* data, size_t size);
  // End of `stream`: a last line without a newline is emitted now.
  void finish(Stream stream);
  // A line from the supervisor itself about this rank (e.g. an exec failure).
  void add_line(Stream stream, const std::string& line) { emit(stream, line); }

  std::vector<std::string> tail() const { return {tail_.begin(), tail_.end()}; }

 private:
  void emit(Stream stream, const std::string& line);

  OutputSinks sinks_;
  std::string pending_[2];  // the unfinished line of each stream
  std::deque<std::string> tail_;
};

// Writes all of data to fd, retrying on EINTR and short writes; false on error.
bool write_fully(int fd, const char* data, size_t size);

}  // namespace bagua::launch
