// `bagua run` and `bagua plan` on CSV files that carry the load_balancing
// sampler's complexity column (issue 42): by default it is not an input, in
// the training set and the eval set alike, so the shipped 49-input model
// trains on the 49 pixel columns of a 51-column file.
#include "support/bagua_run.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace {

using namespace bagua::testing;

// The thumbnails' header and rows [first, first + count), each with a "len"
// column: its number of non-zero pixels.
void write_with_length(const fs::path& out, int first, int count) {
  std::istringstream in(read_file(kSource + "/recipes/data/fashion-thumbnails-train.csv"));
  std::ofstream file(out);
  std::string line;
  std::getline(in, line);
  file << line << ",len\n";
  for (int row = 0; row < first + count && std::getline(in, line); ++row) {
    if (row < first) continue;
    int nonzero = 0;
    std::istringstream fields(line);
    for (std::string f; std::getline(fields, f, ',');) nonzero += std::stod(f) != 0.0;
    file << line << "," << nonzero << "\n";
  }
}

TEST_F(RunTest, ACsvComplexityColumnIsNotAnInputByDefault) {
  write_with_length(dir_ / "train.csv", 0, 160);
  write_with_length(dir_ / "eval.csv", 160, 48);
  const fs::path recipe = dir_ / "csv-len.yaml";
  std::ofstream(recipe) << "name: csv-len\n"
                        << "model: {torchscript: " << kSource << "/recipes/models/mlp49.pt, loss: cross_entropy}\n"
                        << "data:\n"
                        << "  train: {format: csv, path: " << (dir_ / "train.csv").string() << ", target_column: label}\n"
                        << "  eval: {format: csv, path: " << (dir_ / "eval.csv").string() << ", target_column: label}\n"
                        << "  batch_size: 16\n"
                        << "  sampler: {type: load_balancing, complexity_field: len}\n"
                        << "optimizers: [{type: adam, lr: 0.003}]\n"
                        << "distributed: {nproc_per_node: 1}\n"
                        << "train: {epochs: 1, max_steps: 3, log_every_steps: 1}\n"
                        << "output: {dir: " << (dir_ / "out").string() << "}\n";
  const std::string columns = "input [49] float32 from columns 0-48 ('p0'..'p48')";

  RunOutcome plan = bagua_command("plan", recipe.string());
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_TRUE(contains(plan.output, "train: csv train.csv: 160 samples, " + columns)) << plan.output;
  EXPECT_TRUE(contains(plan.output, "eval: csv eval.csv: 48 samples, " + columns)) << plan.output;

  RunOutcome run = bagua_run(recipe.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string log = read_file(dir_ / "out" / "logs" / "rank-0.log");
  EXPECT_TRUE(contains(log, columns)) << log;
  EXPECT_TRUE(contains(log, "load_balancing sampler on 'len'")) << log;
}

}  // namespace
