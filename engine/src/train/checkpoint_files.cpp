// The files of a checkpoint: written with every step checked and summed as
// the bytes go out, read back and summed, listed by step.
#include "train/checkpoint_files.h"

#include <bagua/errors.h>

#include "common/libtorch_compat.h"
#include "train/crc32.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <regex>
#include <vector>

namespace fs = std::filesystem;

namespace bagua::train {
namespace {

std::string errno_text(int error) { return std::strerror(error); }

// A file written and made durable with every step checked (a full disk
// shows at write, fsync or close, depending on the filesystem); its size
// and CRC-32 are summed as the bytes go out, so nothing is read back.
// The first error is remembered and write() keeps accepting bytes, so a
// producer that cannot unwind mid-stream (LibTorch's archive writer) can
// finish; finish() then throws it.
class CheckedFile {
 public:
  explicit CheckedFile(const fs::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error("cannot create " + path.string() + ": " + errno_text(errno));
  }
  ~CheckedFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const void* data, size_t n) {
    crc_ = crc32_update(crc_, data, n);  // in pieces: a tensor record may pass 4 GiB
    sum_.bytes += n;
    const char* p = static_cast<const char*>(data);
    while (error_ == 0 && n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        error_ = errno;
        break;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  FileSum finish() {
    if (error_ == 0 && ::fsync(fd_) != 0) error_ = errno;
    if (::close(fd_) != 0 && error_ == 0) error_ = errno;
    fd_ = -1;
    if (error_ != 0) throw Error("cannot write " + path_.string() + ": " + errno_text(error_));
    sum_.crc = crc_;
    return sum_;
  }

 private:
  fs::path path_;
  int fd_ = -1;
  int error_ = 0;
  uint32_t crc_ = crc32_initial();
  FileSum sum_;
};

}  // namespace

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%08lld", static_cast<long long>(step));
  return buf;
}

FileSum write_text(const fs::path& path, const std::string& text) {
  CheckedFile file(path);
  file.write(text.data(), text.size());
  return file.finish();
}

// LibTorch's own file writer aborts the process on a full disk (its
// destructor throws while unwinding), so archives go through CheckedFile.
FileSum save_archive(torch::serialize::OutputArchive& archive, const fs::path& path) {
  CheckedFile file(path);
  archive.save_to([&](const void* data, size_t n) -> size_t {
    file.write(data, n);
    return n;
  });
  return file.finish();
}

void fsync_path(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void replace_directory(const fs::path& tmp, const fs::path& final_dir, const fs::path& aside) {
  const bool replacing = fs::exists(final_dir);
  if (replacing) {
    bagua::compat::remove_all(aside);
    fs::rename(final_dir, aside);
  }
  fs::rename(tmp, final_dir);
  fsync_path(final_dir.parent_path());
  if (replacing) bagua::compat::remove_all(aside);
}

// A file's size and CRC-32, read back (a resume verifying a checkpoint).
FileSum file_sum(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot read " + path.string() + ": " + errno_text(errno));
  FileSum sum;
  uLong crc = ::crc32(0L, Z_NULL, 0);
  std::vector<unsigned char> buffer(1 << 20);
  for (;;) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      throw Error("cannot read " + path.string() + ": " + errno_text(e));
    }
    if (n == 0) break;
    crc = ::crc32(crc, buffer.data(), static_cast<uInt>(n));
    sum.bytes += static_cast<uint64_t>(n);
  }
  ::close(fd);
  sum.crc = static_cast<uint32_t>(crc);
  return sum;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

CheckpointFile checkpoint_file(const std::string& name, const FileSum& sum) { return {name, sum.bytes, hex32(sum.crc)}; }

// Checkpoint directories under `dir`, oldest first (only complete ones).
std::vector<std::pair<int64_t, fs::path>> complete_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  static const std::regex name("step-([0-9]+)");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    std::string base = entry.path().filename().string();
    if (entry.is_directory() && std::regex_match(base, m, name) && fs::exists(entry.path() / "meta.json")) {
      out.emplace_back(std::stoll(m[1]), entry.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace bagua::train
