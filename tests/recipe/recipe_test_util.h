// Helpers shared by the recipe tests: corpus files, their expectations,
// and running the real `bagua` binary.
#pragma once

#include <bagua/recipe.h>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace bagua::testing {

inline std::string source_path(const std::string& relative) {
  return std::string(BAGUA_SOURCE_DIR) + "/" + relative;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Every *.yaml directly in `dir` (relative to the source root), sorted.
inline std::vector<std::string> yaml_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(source_path(dir)))
    if (e.path().extension() == ".yaml") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// What a corpus file's header comments ask for:
//   # expect: [FILE:]LINE: fragment   (an error at LINE whose text has fragment)
//   # set: key.path=value            (an override)
//   # env: NAME=value                (an environment variable)
struct Expectation {
  std::string file;  // empty: any file
  int line = 0;
  std::string fragment;
};

struct CorpusCase {
  std::string path;
  std::vector<Expectation> expect;
  std::vector<std::string> overrides;
  std::vector<std::pair<std::string, std::string>> env;
};

inline CorpusCase parse_case(const std::string& path) {
  CorpusCase c{path, {}, {}, {}};
  std::istringstream in(read_text(path));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# expect: ", 0) == 0) {
      std::string rest = line.substr(10);
      Expectation e;
      size_t colon = rest.find(": ");
      std::string where = rest.substr(0, colon);
      e.fragment = rest.substr(colon + 2);
      if (size_t c2 = where.rfind(':'); c2 != std::string::npos) {
        e.file = where.substr(0, c2);
        where = where.substr(c2 + 1);
      }
      e.line = std::stoi(where);
      c.expect.push_back(e);
    } else if (line.rfind("# set: ", 0) == 0) {
      c.overrides.push_back(line.substr(7));
    } else if (line.rfind("# env: ", 0) == 0) {
      std::string kv = line.substr(7);
      c.env.emplace_back(kv.substr(0, kv.find('=')), kv.substr(kv.find('=') + 1));
    }
  }
  return c;
}

// True when one diagnostic line matches the expectation.
inline bool line_matches(const std::string& text, const Expectation& e) {
  std::string at = ":" + std::to_string(e.line) + ":";
  if (!e.file.empty()) at = e.file + at;
  return text.find(at) != std::string::npos && text.find(e.fragment) != std::string::npos;
}

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    std::istringstream in(output);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  }
};

// Runs `bagua ARGS...` with extra environment variables.
inline CommandResult run_bagua(const std::vector<std::string>& args,
                               const std::vector<std::pair<std::string, std::string>>& env = {}) {
  std::string cmd = "env";
  for (const auto& [k, v] : env) cmd += " " + shell_quote(k + "=" + v);
  cmd += " " + shell_quote(BAGUA_CLI);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " 2>&1";
  CommandResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Sets environment variables for the lifetime of the object.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::vector<std::pair<std::string, std::string>>& vars) : vars_(vars) {
    for (const auto& [k, v] : vars_) setenv(k.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : vars_) unsetenv(k.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::string>> vars_;
};

inline std::string test_name(const std::string& path) {
  std::string stem = std::filesystem::path(path).stem().string();
  for (char& c : stem)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return stem;
}

}  // namespace bagua::testing
