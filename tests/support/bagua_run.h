// Helpers for end-to-end tests of `bagua run`: the real binary on real
// files, a temporary directory per test, and readers for what a run writes.
#pragma once

#include "common/libtorch_compat.h"
#include "support/multiprocess.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/script.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace bagua::testing {

namespace fs = std::filesystem;

inline const std::string kSource = BAGUA_SOURCE_DIR;
inline const std::string kFmnist = "/usr/share/datasets/fashion-mnist/";

inline std::string read_file(const fs::path& path) { return slurp(path.string()); }

inline bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

struct RunOutcome {
  int exit_code = -1;
  std::string output;
};

// Runs `bagua SUBCOMMAND` with the given arguments (and environment
// prefix), stdin from /dev/null, and collects its exit code and everything
// it printed.
inline RunOutcome bagua_command(const std::string& subcommand, const std::string& args, const std::string& env = "") {
  static int calls = 0;
  fs::path out = fs::temp_directory_path() /
                 ("bagua-" + subcommand + "-" + std::to_string(getpid()) + "-" + std::to_string(calls++) + ".out");
  std::string cmd = env + " " + BAGUA_CLI + " " + subcommand + " " + args + " > " + out.string() + " 2>&1 < /dev/null";
  int status = std::system(cmd.c_str());
  RunOutcome r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.output = read_file(out);
  fs::remove(out);
  return r;
}

// `bagua run ARGS`.
inline RunOutcome bagua_run(const std::string& args, const std::string& env = "") {
  return bagua_command("run", args, env);
}

// The worker process stopped (state T: BAGUA_STOP_AT_STEP) whose command
// line mentions `marker`, waiting up to 60 s; -1 if none.
inline pid_t stopped_worker(const std::string& marker) {
  for (int tries = 0; tries < 6000; ++tries) {
    for (const auto& entry : fs::directory_iterator("/proc")) {
      const std::string name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      const std::string stat = read_file(entry.path() / "stat");
      const auto close = stat.rfind(')');
      if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'T') continue;
      if (contains(read_file(entry.path() / "cmdline"), marker)) return static_cast<pid_t>(std::stoi(name));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

// `bagua run ARGS` started in the background (with `env`, "NAME=VALUE ...",
// added to its environment), its output into `out`; the caller signals and
// waits for the pid (the launcher's: exec'd by sh).
inline pid_t start_bagua_run(const std::string& args, const fs::path& out, const std::string& env = "") {
  std::string cmd = "exec " + (env.empty() ? std::string() : "env " + env + " ") + std::string(BAGUA_CLI) + " run " +
                    args + " > " + out.string() + " 2>&1";
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// The parameters of a saved TorchScript model, in order.
inline std::vector<at::Tensor> model_parameters(const fs::path& model_pt) {
  torch::jit::Module m = torch::jit::load(model_pt.string());
  std::vector<at::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

inline double max_abs_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, (a[i] - b[i]).abs().max().item<double>());
  return m;
}

// Every record of a metrics.jsonl.
inline std::vector<nlohmann::json> metrics(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// The last eval_accuracy of a metrics.jsonl, or -1.
inline double final_accuracy(const fs::path& path) {
  double accuracy = -1;
  for (const auto& j : metrics(path)) {
    if (j.contains("eval_accuracy")) accuracy = j["eval_accuracy"];
  }
  return accuracy;
}

// A fixture with a fresh directory per test (kept when the test fails).
class RunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A parameterised test's name has a '/' ("Name/param"): one directory,
    // not a parent left behind by the removal.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() / ("bagua-e2e-" + std::to_string(getpid()) + "-" + name);
    bagua::compat::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) bagua::compat::remove_all(dir_);
  }

  // A small Fashion-MNIST recipe in the test's directory.
  std::string write_recipe(const std::string& name, const std::string& extra = "",
                           const std::string& model = "tests/fixtures/models/mlp_small.pt") {
    fs::path path = dir_ / (name + ".yaml");
    std::ofstream(path) << "name: " << name << "\n"
                        << "model: {torchscript: " << kSource << "/" << model << ", loss: cross_entropy}\n"
                        << "data:\n"
                        << "  train: {format: idx, images: " << kFmnist << "train-images-idx3-ubyte.gz, labels: "
                        << kFmnist << "train-labels-idx1-ubyte.gz}\n"
                        << "  batch_size: 16\n"
                        << "optimizers: [{type: sgd, lr: 0.05, momentum: 0.9}]\n"
                        << "distributed: {nproc_per_node: 2}\n"
                        << "train: {epochs: 1, max_steps: 24, log_every_steps: 4}\n"
                        << "checkpoint: {every_steps: 8, keep: 2}\n"
                        << "output: {dir: " << (dir_ / name).string() << "}\n"
                        << extra;
    return path.string();
  }

  fs::path dir_;
};

// One rank's samples of one step, as BAGUA_RECORD_SAMPLES writes them.
struct StepSamples {
  int64_t step = 0, epoch = 0;
  std::vector<int64_t> samples;
};

// The steps that count, in file order: a "resume K" line voids the steps
// after K that the run resumed behind (rolled back).
inline std::vector<StepSamples> steps_that_count(const fs::path& file) {
  std::vector<StepSamples> kept;
  std::istringstream in(read_file(file));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first == "resume") {
      int64_t k = 0;
      words >> k;
      kept.erase(std::remove_if(kept.begin(), kept.end(), [k](const StepSamples& s) { return s.step > k; }), kept.end());
      continue;
    }
    StepSamples s;
    words >> s.step >> s.epoch;
    for (int64_t i; words >> i;) s.samples.push_back(i);
    kept.push_back(s);
  }
  return kept;
}

// Each epoch's samples over the steps that count: epoch -> sample -> times.
inline std::map<int64_t, std::map<int64_t, int>> samples_per_epoch(const fs::path& file) {
  std::map<int64_t, std::map<int64_t, int>> seen;
  for (const auto& s : steps_that_count(file)) {
    for (int64_t i : s.samples) seen[s.epoch][i] += 1;
  }
  return seen;
}

}  // namespace bagua::testing
