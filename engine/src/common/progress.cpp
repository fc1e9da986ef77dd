#include "common/progress.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace bagua::progress {

namespace fs = std::filesystem;

std::string report_file(const std::string& store_file, const std::string& scope, int rank) {
  return (fs::path(store_file).parent_path() / "progress" / (scope + "rank-" + std::to_string(rank))).string();
}

bool write_report_file(const std::string& path, const Report& report) {
  const std::string temporary = path + ".tmp";  // one writer per rank
  std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
  if (!out) {
    // The first report of this attempt: its directories are made then, not
    // looked up on every report (up to ten a second).
    std::error_code error;
    fs::create_directories(fs::path(path).parent_path(), error);
    if (error) return false;
    out.open(temporary, std::ios::binary | std::ios::trunc);
  }
  const std::vector<uint8_t> bytes = encode(report);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return false;
  return std::rename(temporary.c_str(), path.c_str()) == 0;
}

std::optional<Report> read_report_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return decode(bytes);
}

}  // namespace bagua::progress
