// Mutations of the shipped recipes through load_recipe() (what `bagua
// validate` and `bagua run` call first): wrong types, deleted, duplicated
// and unknown keys, deep nesting, huge numbers, invalid UTF-8, truncation,
// flipped bytes and YAML alias bombs. Every case must end with a valid
// recipe or a RecipeError whose diagnostics all name the file and a line
// (never a crash, another exception, or a hang: each case is bounded).
//
// Deterministic: the mutations come from a fixed seed, so a failure names
// a case that can be rerun (BAGUA_FUZZ_CASES raises the count locally).
#include "recipe/mutations.h"
#include "recipe/recipe_test_util.h"
#include "support/bounded.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <random>
#include <thread>

#include <unistd.h>

namespace bagua::testing {
namespace {

TEST(RecipeFuzz, MutatedRecipesAreValidOrFailWithFileAndLine) {
  int cases = 2000;
  if (const char* n = std::getenv("BAGUA_FUZZ_CASES")) cases = std::atoi(n);
  const auto sources = yaml_files("recipes");
  ASSERT_FALSE(sources.empty());
  std::mt19937_64 rng(20261123);
  const auto dir = std::filesystem::temp_directory_path() / ("bagua-fuzz-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  int valid = 0, invalid = 0;
  for (int c = 0; c < cases; ++c) {
    const std::string& source = sources[static_cast<size_t>(c) % sources.size()];
    std::string kind;
    const std::string text = mutate_recipe(read_text(source), rng, kind);
    // In the recipe's folder's place: relative model paths resolve as in the original.
    const auto path = dir / ("case-" + std::to_string(c) + ".yaml");
    std::ofstream(path, std::ios::binary) << text;
    const std::string what = "case " + std::to_string(c) + " (" + kind + " of " + source + ")";
    // On a thread of its own, so a hang is a failure here, not a stuck suite.
    const std::string result = run_bounded(
        [file = path.string()]() -> std::string {
          try {
            RecipeLoadOptions options;
            options.check_files = false;  // the mutations are about the text
            load_recipe(file, {}, options);
            return "valid";
          } catch (const RecipeError& e) {
            std::string verdict = e.diagnostics().empty() ? "a RecipeError with no diagnostics" : "invalid";
            for (const auto& d : e.diagnostics()) {
              if (d.file.empty() || d.line < 1) return "a diagnostic without file and line: " + d.to_string();
            }
            return verdict;
          }
        },
        std::chrono::seconds(10), what + "\n--- text ---\n" + text.substr(0, 2000));
    if (result == "valid") {
      ++valid;
    } else if (result == "invalid") {
      ++invalid;
    } else {
      ADD_FAILURE() << what << ": " << result << "\n--- text ---\n" << text.substr(0, 2000);
    }
    std::filesystem::remove(path);
  }
  std::filesystem::remove_all(dir);
  // The mutations must mostly break recipes, or they test nothing.
  EXPECT_GT(invalid, cases / 2) << valid << " valid, " << invalid << " invalid";
}

}  // namespace
}  // namespace bagua::testing
