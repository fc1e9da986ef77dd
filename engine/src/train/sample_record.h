// BAGUA_RECORD_SAMPLES=FILE (docs/run.md, testing aids): one line per rank
// and step, "RANK STEP EPOCH INDEX...", appended with one write so that the
// ranks' lines do not interleave; rank 0 writes "resume STEP" when a run
// resumes, so a reader drops what the resumed steps replaced.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bagua::train {

class SampleRecord {
 public:
  // Null unless BAGUA_RECORD_SAMPLES is set; a file that cannot be opened
  // throws a user Error. `resumed_at`: the step a resumed run continues
  // from (rank 0 marks it), or a negative number.
  static std::unique_ptr<SampleRecord> from_environment(int rank, int64_t resumed_at);
  void record(int64_t step, int64_t epoch, const std::vector<int64_t>& samples);
  ~SampleRecord();
  SampleRecord(const SampleRecord&) = delete;
  SampleRecord& operator=(const SampleRecord&) = delete;

 private:
  SampleRecord(int fd, int rank) : fd_(fd), rank_(rank) {}
  void write_line(const std::string& line);
  int fd_;
  int rank_;
};

}  // namespace bagua::train
