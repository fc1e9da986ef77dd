// Mutations of the shipped recipes (tests/recipe/mutations.h, as the
// in-process fuzz in fuzz_test.cpp makes them) through the real
// `bagua validate`: every case must exit 0 (valid, with its summary and no
// internal error) or 2 (invalid, with a FILE:LINE diagnostic naming the
// mutated file, or the unmutated base recipe it extends), never another
// code, a signal or a hang (each case is killed after 20 s and named).
//
// Each run costs the binary's start-up (LibTorch: about half a second), so
// it runs 30 cases, one per core at a time (about 15 s on 2 cores);
// BAGUA_FUZZ_BINARY_CASES changes the count. Deterministic (fixed seed): a failure names a
// case that can be rerun.
#include "recipe/mutations.h"
#include "recipe/recipe_test_util.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <iostream>
#include <thread>

namespace bagua::testing {
namespace {

namespace fs = std::filesystem;

struct Bounded {
  bool timed_out = false;
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it
  std::string out, err;
};

// Runs `argv` with stdout and stderr in files under `dir` (named after
// `tag`), killing it after `limit`.
Bounded run_bounded(const std::vector<std::string>& argv, const fs::path& dir, const std::string& tag,
                    std::chrono::seconds limit) {
  const std::string out_path = (dir / (tag + ".out")).string();
  const std::string err_path = (dir / (tag + ".err")).string();
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  Bounded r;
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&files, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int failed = posix_spawn(&pid, args[0], &files, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  if (failed) {
    r.err = std::string("posix_spawn failed: ") + std::strerror(failed);
    return r;
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      r.err = std::string("waitpid failed: ") + std::strerror(errno);
      return r;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!r.timed_out) {
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  }
  r.out = read_text(out_path);
  r.err = read_text(err_path);
  fs::remove(out_path);
  fs::remove(err_path);
  return r;
}

// True when `rest` (what follows "FILE:") starts "LINE: " or "LINE:COL: "
// with LINE >= 1.
bool at_line(const std::string& rest) {
  size_t i = 0;
  auto number = [&] {
    const size_t start = i;
    while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) ++i;
    return i > start;
  };
  if (!number() || std::atoi(rest.c_str()) < 1) return false;
  if (rest.compare(i, 2, ": ") == 0) return true;
  if (i >= rest.size() || rest[i] != ':') return false;
  ++i;
  return number() && rest.compare(i, 2, ": ") == 0;
}

// What is wrong with one case's outcome; empty when nothing is.
std::string judge(const Bounded& r, const std::string& recipe, const std::string& base) {
  if (r.timed_out) return "did not finish within 20 s (killed)";
  if (r.signal) return std::string("killed by signal ") + std::to_string(r.signal) + " (" + strsignal(r.signal) + ")";
  const std::string both = r.out + r.err;
  if (r.exit_code == 0) {
    if (both.find("internal error") != std::string::npos) return "exit 0 with an internal error";
    if (r.out.find(recipe + ": valid recipe") == std::string::npos) return "exit 0 without its summary";
    return "";
  }
  if (r.exit_code != 2) return "exit " + std::to_string(r.exit_code) + " (only 0 and 2 are allowed)";
  if (both.find("internal error") != std::string::npos) return "exit 2 with an internal error";
  // FILE:LINE[:COL]: ..., the file being the mutated recipe, or the
  // (unmutated) base it extends when the merged tree is wrong there.
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);) {
    for (const std::string& file : {recipe, base}) {
      if (line.rfind(file + ":", 0) == 0 && at_line(line.substr(file.size() + 1))) return "";
    }
  }
  return "exit 2 without a FILE:LINE diagnostic naming " + recipe;
}

TEST(RecipeBinaryFuzz, BaguaValidateExitsZeroOrTwoWithFileAndLine) {
  int cases = 30;
  if (const char* n = std::getenv("BAGUA_FUZZ_BINARY_CASES")) cases = std::atoi(n);
  const auto sources = yaml_files("recipes");
  ASSERT_FALSE(sources.empty());
  // The cases live beside what the shipped recipes refer to: models/ and
  // data/ (linked), and the base recipe the others extend (copied, never
  // mutated), so an unbroken case is valid, files checked and all.
  std::string tmpl = (fs::temp_directory_path() / "bagua-validate-fuzz-XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const fs::path dir = tmpl;
  fs::create_directory_symlink(source_path("recipes/models"), dir / "models");
  fs::create_directory_symlink(source_path("recipes/data"), dir / "data");
  const std::string base = (dir / "fashion-mnist-mlp.yaml").string();
  fs::copy_file(source_path("recipes/fashion-mnist-mlp.yaml"), base);

  std::mt19937_64 rng(20261124);  // not fuzz_test.cpp's seed: other cases
  struct Case {
    std::string what, path, text;
  };
  std::vector<Case> all;
  for (int c = 0; c < cases; ++c) {
    const std::string& source = sources[static_cast<size_t>(c) % sources.size()];
    std::string kind;
    Case k;
    k.text = mutate_recipe(read_text(source), rng, kind);
    k.path = (dir / ("case-" + std::to_string(c) + ".yaml")).string();
    k.what = "case " + std::to_string(c) + " (" + kind + " of " + source + ")";
    std::ofstream(k.path, std::ios::binary) << k.text;
    all.push_back(std::move(k));
  }

  // A few at a time: most of each run is the binary starting.
  const size_t width = std::max(2u, std::thread::hardware_concurrency());
  int valid = 0, invalid = 0;
  for (size_t start = 0; start < all.size(); start += width) {
    std::vector<std::future<Bounded>> running;
    for (size_t i = start; i < std::min(all.size(), start + width); ++i) {
      running.push_back(std::async(std::launch::async, [&, i] {
        return run_bounded({BAGUA_CLI, "validate", all[i].path}, dir, "run-" + std::to_string(i),
                           std::chrono::seconds(20));
      }));
    }
    for (size_t i = start; i < start + running.size(); ++i) {
      const Bounded r = running[i - start].get();
      const std::string problem = judge(r, all[i].path, base);
      if (!problem.empty()) {
        ADD_FAILURE() << all[i].what << ": " << problem << "\n--- stdout ---\n"
                      << r.out.substr(0, 2000) << "--- stderr ---\n"
                      << r.err.substr(0, 4000) << "--- text ---\n"
                      << all[i].text.substr(0, 2000);
      } else {
        ++(r.exit_code == 0 ? valid : invalid);
      }
    }
  }
  if (!HasFailure()) {  // kept for a look when a case failed
    // One level, links removed and not followed (no remove_all: see
    // common/libtorch_compat.h, note 4).
    for (const auto& e : fs::directory_iterator(dir)) fs::remove(e.path());
    fs::remove(dir);
  } else {
    std::cerr << "the cases are in " << dir << "\n";
  }
  // The mutations must mostly break recipes, or they test nothing.
  EXPECT_GT(invalid, cases / 2) << valid << " valid, " << invalid << " invalid";
}

}  // namespace
}  // namespace bagua::testing
