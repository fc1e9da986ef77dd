// What workers tell their launcher about their progress, through the
// rendezvous store (under the attempt's prefix): one key per rank, rewritten
// every second by the worker's reporter thread, read by the launchers'
// progress watch (launch/progress_monitor.h).
//
//   bagua/progress/<rank>  "<beat> <step> <collectives> <diverged> <phase>":
//                          beat counts the reports (a frozen process stops
//                          counting), step the optimizer steps done,
//                          collectives those the process started (a rank
//                          hung before one its peers wait in has fewer),
//                          diverged when this rank's first non-finite loss
//                          or gradient was computed (Unix time in ms; 0:
//                          none), phase what it is doing
//   bagua/failure/<node>   "<text>": a launcher whose worker failed tells
//                          the other nodes' launchers
//
// A one-node bagua run's store is a file (c10d's FileStore, which appends
// every set and never shrinks): its reports go to a file per rank instead,
// rewritten whole (report_file(), write_report_file()).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace bagua::progress {

inline std::string rank_key(int rank) { return "bagua/progress/" + std::to_string(rank); }
inline std::string failure_key(int node) { return "bagua/failure/" + std::to_string(node); }
// Counts the failures published (store add), numbering them: "ORDER TEXT".
inline const char* const kFailureOrderKey = "bagua/failure-order";
// The phase a worker reports once it is done: it stops reporting, on purpose.
inline const char* const kExitedPhase = "exited";

// Phases whose length depends on the model, the data or the disk
// (train::phase_name's start-up, checkpoint, evaluation and finishing): the
// watch never calls a rank in one of them hung while it still reports.
inline bool phase_may_take_long(const std::string& phase) {
  return phase == "start-up" || phase == "checkpoint" || phase == "evaluation" || phase == "finishing" ||
         phase == kExitedPhase;
}

struct Report {
  int64_t beat = 0;
  int64_t step = 0;
  int64_t collectives = 0;
  // The wall-clock time (ms since the Unix epoch) of the step whose loss or
  // gradient this rank found non-finite, when that ended it (0: none). Of
  // several ranks that each end with a diverged training (an asynchronous
  // algorithm spreads one rank's NaN to its peers), the earliest is the
  // cause: the launcher names it, whichever process exited first.
  int64_t diverged_ms = 0;
  std::string phase;
};

inline std::vector<uint8_t> encode(const Report& r) {
  std::string text =
      std::to_string(r.beat) + " " + std::to_string(r.step) + " " + std::to_string(r.collectives) + " " +
      std::to_string(r.diverged_ms) + " " + r.phase;
  return {text.begin(), text.end()};
}

inline std::optional<Report> decode(const std::vector<uint8_t>& bytes) {
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  Report r;
  if (!(in >> r.beat >> r.step >> r.collectives >> r.diverged_ms)) return std::nullopt;
  std::getline(in >> std::ws, r.phase);
  return r;
}

// The report file of `rank` when the store is the file `store_file`:
// STORE_DIR/progress/<scope>rank-<rank> (scope the attempt's "attempt-K/").
std::string report_file(const std::string& store_file, const std::string& scope, int rank);

// Replaces `path` with `report` at once (a temporary file renamed over it):
// a reader sees the old report or the new one. The directories are made.
// False when it could not be written.
bool write_report_file(const std::string& path, const Report& report);

// The report in `path`; nullopt when there is none (yet) or it is unreadable.
std::optional<Report> read_report_file(const std::string& path);

}  // namespace bagua::progress
