// Helpers for the data tests: running Debian's Python (with torch) as the
// reference, temporary directories, and DataError expectations.
#pragma once

#include "support/python.h"
#include <bagua/data.h>

#include "common/libtorch_compat.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>

namespace bagua::testing {

inline std::string data_dir() { return std::string(BAGUA_SOURCE_DIR) + "/tests/fixtures/data"; }

// A fresh directory under the system temp dir, removed at destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "bagua-data-XXXXXX").string();
    char* made = mkdtemp(tmpl.data());
    if (!made) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    bagua::compat::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// Runs `script` with test_python() (Debian's /usr/bin/python3, with torch) and
// returns its stdout; fails the test on a non-zero exit.
inline std::string run_python(const std::string& script) {
  TempDir dir;
  std::string file = dir.file("script.py");
  write_file(file, script);
  std::string cmd = "OMP_NUM_THREADS=1 " + test_python() + " " + file + " 2>" + dir.file("stderr");
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) {
    ADD_FAILURE() << "popen failed";
    return "";
  }
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  int status = pclose(pipe);
  if (status != 0) {
    std::ifstream err(dir.file("stderr"));
    std::stringstream s;
    s << err.rdbuf();
    ADD_FAILURE() << "python3 failed (status " << status << "):\n" << s.str();
  }
  return out;
}

// Expects body() to throw DataError, a user error, whose message contains
// every fragment.
template <typename F>
void expect_data_error(F&& body, std::initializer_list<std::string> fragments) {
  try {
    body();
    ADD_FAILURE() << "expected a DataError, none was thrown";
  } catch (const DataError& e) {
    EXPECT_TRUE(e.is_user_error());
    std::string message = e.what();
    for (const auto& f : fragments)
      EXPECT_NE(message.find(f), std::string::npos) << "message lacks '" << f << "': " << message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a DataError, got: " << e.what();
  }
}

}  // namespace bagua::testing
