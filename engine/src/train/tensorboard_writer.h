// TensorBoard scalars for a run: rank 0 writes
// OUTPUT/tensorboard/events.out.tfevents.<unix time>.<host name>, a file of
// TFRecords (train/tfrecord.h) holding serialised Event protos
// (tensorboard_event.proto, compiled by protoc and written with libprotobuf):
// first the file version, then one Event per record with its scalars.
//
// Each writer (each start of a run, resumes included) opens a new file, as
// TensorFlow's writers do; TensorBoard reads every file in the directory.
// Every event is flushed when written, so a crashed run's file is readable.
#pragma once

#include "train/tfrecord.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace bagua::train {

using Scalars = std::vector<std::pair<std::string, double>>;  // tag, value

class TensorBoardWriter {
 public:
  // Creates `dir` when needed and a new event file in it, and writes the
  // file-version event. Throws bagua::Error.
  explicit TensorBoardWriter(const std::string& dir);

  // One Event at `step` with these scalars (stored as 32-bit floats, as
  // TensorBoard's simple_value is), stamped with the current time.
  void scalars(int64_t step, const Scalars& values);

  const std::string& path() const { return file_.path(); }

 private:
  TFRecordFile file_;
};

// The file name a writer in `dir` would take now (creating `dir`):
// DIR/events.out.tfevents.<unix time>.<host name>, with ".N" added when
// that name is taken (two starts within one second).
std::string new_event_file_path(const std::string& dir);

}  // namespace bagua::train
