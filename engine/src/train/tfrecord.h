// TFRecord framing, the container of TensorBoard event files: each record
// is its length (uint64, little-endian), the masked CRC32C of those 8
// bytes (uint32 LE), the data, and the masked CRC32C of the data.
// masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8, as TensorFlow's
// lib/hash/crc32c.h defines it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace bagua::train {

// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78) of `n` bytes.
uint32_t crc32c(const void* data, size_t n);

// The masked form TFRecord stores.
uint32_t masked_crc32c(const void* data, size_t n);

// The framed record around `data`.
std::string tfrecord_frame(const std::string& data);

// A file of TFRecords, opened for appending; write() flushes each record to
// the operating system, so a crashed writer leaves only whole records
// (bar one torn record at the very end, which readers skip).
class TFRecordFile {
 public:
  // Throws bagua::Error (a user error: the output directory) when `path`
  // cannot be opened or written.
  explicit TFRecordFile(const std::string& path);
  ~TFRecordFile();
  TFRecordFile(const TFRecordFile&) = delete;
  TFRecordFile& operator=(const TFRecordFile&) = delete;

  void write(const std::string& data);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace bagua::train
