#include "train/tensorboard_writer.h"

#include "tensorboard_event.pb.h"

#include <bagua/system.h>
#include <bagua/errors.h>

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>

namespace bagua::train {
namespace {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}


}  // namespace

std::string new_event_file_path(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create " + dir + ": " + ec.message(), true);
  const std::string base =
      (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(std::time(nullptr)) + "." + host_name()))
          .string();
  std::string path = base;
  for (int n = 1; std::filesystem::exists(path); ++n) path = base + "." + std::to_string(n);
  return path;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir)
    : file_(new_event_file_path(dir)) {
  bagua::tensorboard::Event version;
  version.set_wall_time(unix_seconds());
  version.set_file_version("brain.Event:2");
  file_.write(version.SerializeAsString());
}

void TensorBoardWriter::scalars(int64_t step, const Scalars& values) {
  bagua::tensorboard::Event event;
  event.set_wall_time(unix_seconds());
  event.set_step(step);
  bagua::tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : values) {
    bagua::tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  file_.write(event.SerializeAsString());
}

}  // namespace bagua::train
