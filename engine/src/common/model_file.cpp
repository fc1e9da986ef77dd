#include <bagua/model_file.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string_view>
#include <vector>

namespace bagua {
namespace {

uint64_t little_endian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// The entry names of the zip archive `in` of `size` bytes, from its central
// directory (zip64 too, as PyTorch writes large archives); nothing when the
// end records cannot be found (not a zip, or cut short).
std::vector<std::string> zip_entry_names(std::ifstream& in, uint64_t size) {
  constexpr uint64_t kEndRecord = 22, kMaxComment = 0xFFFF;
  if (size < kEndRecord) return {};
  const uint64_t tail_size = std::min<uint64_t>(size, kEndRecord + kMaxComment + 20);
  std::string tail(tail_size, '\0');
  in.seekg(static_cast<std::streamoff>(size - tail_size));
  if (!in.read(&tail[0], static_cast<std::streamsize>(tail_size))) return {};
  // The end of central directory record, searched from the end.
  size_t end = std::string::npos;
  for (size_t i = tail_size - kEndRecord + 1; i-- > 0;) {
    if (little_endian(&tail[i], 4) == 0x06054b50) {
      end = i;
      break;
    }
  }
  if (end == std::string::npos) return {};
  uint64_t cd_size = little_endian(&tail[end + 12], 4), cd_offset = little_endian(&tail[end + 16], 4);
  if ((cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) && end >= 20 &&
      little_endian(&tail[end - 20], 4) == 0x07064b50) {
    // zip64: the locator before the end record points at the zip64 end record.
    const uint64_t record = little_endian(&tail[end - 20 + 8], 8);
    std::string z(56, '\0');
    in.seekg(static_cast<std::streamoff>(record));
    if (!in.read(&z[0], 56) || little_endian(&z[0], 4) != 0x06064b50) return {};
    cd_size = little_endian(&z[40], 8);
    cd_offset = little_endian(&z[48], 8);
  }
  if (cd_offset > size || cd_size > size - cd_offset || cd_size > (uint64_t{256} << 20)) return {};
  std::string cd(cd_size, '\0');
  in.seekg(static_cast<std::streamoff>(cd_offset));
  if (!in.read(&cd[0], static_cast<std::streamsize>(cd_size))) return {};
  std::vector<std::string> names;
  for (size_t at = 0; at + 46 <= cd.size() && little_endian(&cd[at], 4) == 0x02014b50;) {
    const size_t name = little_endian(&cd[at + 28], 2), extra = little_endian(&cd[at + 30], 2),
                 comment = little_endian(&cd[at + 32], 2);
    if (at + 46 + name > cd.size()) break;
    names.emplace_back(cd.substr(at + 46, name));
    at += 46 + name + extra + comment;
  }
  return names;
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::string torchscript_file_problem(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "it cannot be read";
  const auto size = static_cast<uint64_t>(in.tellg());
  char head[4] = {0, 0, 0, 0};
  in.seekg(0);
  if (size < 4 || !in.read(head, 4)) return "it is too short to be one (" + std::to_string(size) + " bytes)";
  if (std::memcmp(head, "PK\x03\x04", 4) != 0) {
    if (static_cast<unsigned char>(head[0]) == 0x80) return "it is a Python pickle (torch.save() in its old format)";
    return "it is not a zip archive, as TorchScript files are";
  }
  const std::vector<std::string> names = zip_entry_names(in, size);
  if (names.empty()) return "it is a zip archive cut short (no central directory at its end)";
  bool code = false, pickle = false;
  for (const auto& n : names) {
    code = code || n.find("/code/") != std::string::npos || ends_with(n, "/constants.pkl");
    pickle = pickle || ends_with(n, "/data.pkl");
  }
  if (code) return "";
  if (pickle) return "it was written by torch.save() (a pickled model or a state_dict), which only Python can read";
  return "it is a zip archive without TorchScript's code/ and constants.pkl";
}

}  // namespace bagua
