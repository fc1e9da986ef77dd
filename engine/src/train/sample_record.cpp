#include "train/sample_record.h"

#include <bagua/errors.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace bagua::train {

std::unique_ptr<SampleRecord> SampleRecord::from_environment(int rank, int64_t resumed_at) {
  const char* path = std::getenv("BAGUA_RECORD_SAMPLES");
  if (path == nullptr || *path == '\0') return nullptr;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(std::string("BAGUA_RECORD_SAMPLES: cannot open ") + path, true);
  std::unique_ptr<SampleRecord> record(new SampleRecord(fd, rank));
  if (rank == 0 && resumed_at >= 0) record->write_line("resume " + std::to_string(resumed_at) + "\n");
  return record;
}

void SampleRecord::record(int64_t step, int64_t epoch, const std::vector<int64_t>& samples) {
  std::string line = std::to_string(rank_) + " " + std::to_string(step) + " " + std::to_string(epoch);
  for (int64_t i : samples) line += " " + std::to_string(i);
  write_line(line + "\n");
}

void SampleRecord::write_line(const std::string& line) {
  if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    std::fprintf(stderr, "BAGUA_RECORD_SAMPLES: write failed\n");
  }
}

SampleRecord::~SampleRecord() { ::close(fd_); }

}  // namespace bagua::train
