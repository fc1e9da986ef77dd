// An output directory belongs to the recipe that made it: bagua run refuses
// another recipe's, says a refused resume once before any worker starts,
// and leaves a finished run as it is (issue 42, edge 1 and part of 8).
#include "support/bagua_run.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace {

using namespace bagua::testing;

// Every file under `dir` with its contents: what "nothing changed" compares.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string name = fs::relative(e.path(), dir).string();
    if (e.is_regular_file() && name.find(".bagua-run-") == std::string::npos) files[name] = read_file(e.path());
  }
  return files;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_F(RunTest, AnotherRecipesOutputDirectoryIsRefusedBeforeAnyWorkerStarts) {
  const std::string first = write_recipe("first");
  ASSERT_EQ(bagua_run(first + " --set train.max_steps=4").exit_code, 0);
  const auto before = snapshot(dir_ / "first");
  // A recipe of another name pointed at the same directory (as a copy that
  // kept the original's output.dir would be).
  const std::string second = write_recipe("second", "output: {dir: " + (dir_ / "first").string() + "}\n");
  std::string text = read_file(second);
  text.erase(text.find("output: {dir: " + (dir_ / "second").string() + "}\n"),
             ("output: {dir: " + (dir_ / "second").string() + "}\n").size());
  std::ofstream(second) << text;
  RunOutcome r = bagua_run(second + " --set train.max_steps=4");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "holds a run of the recipe first, not of second")) << r.output;
  EXPECT_TRUE(contains(r.output, "--set output.dir=runs/second")) << "the way out:\n" << r.output;
  EXPECT_FALSE(contains(r.output, "failed with")) << "refused before any worker started:\n" << r.output;
  EXPECT_EQ(snapshot(dir_ / "first"), before) << "the first recipe's run is untouched";
  // Said on purpose, it continues that run.
  RunOutcome renamed = bagua_run(second + " --set train.max_steps=8 --set checkpoint.allow_recipe_change=true");
  EXPECT_EQ(renamed.exit_code, 0) << renamed.output;
  EXPECT_TRUE(contains(renamed.output, "resumed from")) << renamed.output;
}

TEST_F(RunTest, AFinishedRunRunAgainSaysSoAndChangesNothing) {
  const std::string recipe = write_recipe("done");
  RunOutcome first = bagua_run(recipe);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto before = snapshot(dir_ / "done");
  RunOutcome again = bagua_run(recipe);
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(contains(again.output, "already complete at step 24")) << again.output;
  EXPECT_FALSE(contains(again.output, "eval")) << "nothing evaluated again:\n" << again.output;
  EXPECT_EQ(snapshot(dir_ / "done"), before) << "nothing in the run directory changed";
  // The same through the run directory.
  RunOutcome by_dir = bagua_run((dir_ / "done").string());
  EXPECT_EQ(by_dir.exit_code, 0) << by_dir.output;
  EXPECT_TRUE(contains(by_dir.output, "already complete at step 24")) << by_dir.output;
  // A longer run of the same recipe continues from there.
  RunOutcome longer = bagua_run(recipe + " --set train.max_steps=32");
  EXPECT_EQ(longer.exit_code, 0) << longer.output;
  EXPECT_TRUE(contains(longer.output, "resumed from")) << longer.output;
  EXPECT_TRUE(contains(longer.output, "done: 32 steps")) << longer.output;
}

TEST_F(RunTest, ARefusedResumeIsSaidOnceBeforeAnyWorkerStarts) {
  const std::string recipe = write_recipe("lr");
  ASSERT_EQ(bagua_run(recipe + " --set train.max_steps=8").exit_code, 0);
  RunOutcome r = bagua_run(recipe + " --set train.max_steps=16 --set 'optimizers[0].lr=0.1'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(count(r.output, "cannot resume from"), 1u) << r.output;
  EXPECT_TRUE(contains(r.output, "optimizers[0].lr: 0.05 in the checkpoint, 0.1 now")) << r.output;
  EXPECT_FALSE(contains(r.output, "failed with")) << "refused before any worker started:\n" << r.output;
}

}  // namespace
