// Helpers for the tests of `bagua plan`: recipes in a fresh directory per
// test, the real binary's output, and the library's plan of the same recipe.
#pragma once

#include <bagua/plan.h>
#include <bagua/recipe.h>

#include "common/libtorch_compat.h"
#include "support/multiprocess.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace bagua::testing {

namespace fs = std::filesystem;

inline const std::string kSourceDir = BAGUA_SOURCE_DIR;

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs `bagua ARGS` (arguments already shell-quoted) with stdout and stderr
// kept apart.
inline CliResult run_bagua(const fs::path& dir, const std::string& args, const std::string& env = "") {
  static int calls = 0;
  const std::string stem = (dir / ("cli-" + std::to_string(calls++))).string();
  const std::string cmd = env + " " + BAGUA_CLI + " " + args + " > " + stem + ".out 2> " + stem + ".err";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(stem + ".out");
  r.err = slurp(stem + ".err");
  return r;
}

// A fixture with a fresh directory per test (kept when the test fails).
class PlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("bagua-plan-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    bagua::compat::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) bagua::compat::remove_all(dir_);
  }

  // A small recipe: the 49-64-10 example MLP on the 7x7 Fashion-MNIST
  // thumbnails (3,000 training rows), CPU and one thread per worker, no
  // evaluation and no checkpoint before the end, so a run is only steps.
  // `algorithm` is the body of the algorithm mapping.
  std::string write_recipe(const std::string& name, const std::string& algorithm,
                           const std::string& optimizer = "{type: sgd, lr: 0.05, momentum: 0.9}",
                           const std::string& extra = "") {
    const fs::path path = dir_ / (name + ".yaml");
    std::ofstream(path) << "name: " << name << "\n"
                        << "model: {torchscript: " << kSourceDir << "/recipes/models/mlp49.pt, loss: cross_entropy}\n"
                        << "data:\n"
                        << "  train: {format: csv, path: " << kSourceDir
                        << "/recipes/data/fashion-thumbnails-train.csv, target_column: label}\n"
                        << "  batch_size: 16\n"
                        << "optimizers: [" << optimizer << "]\n"
                        << "algorithm: {" << algorithm << "}\n"
                        << "distributed: {nproc_per_node: 2}\n"
                        << "train: {epochs: 1, max_steps: 12, log_every_steps: 4, eval_every: never, device: cpu, "
                           "threads: 1}\n"
                        << "checkpoint: {every_steps: 100000}\n"
                        << "output: {dir: " << (dir_ / name).string() << "}\n"
                        << extra;
    return path.string();
  }

  fs::path dir_;
};

}  // namespace bagua::testing
