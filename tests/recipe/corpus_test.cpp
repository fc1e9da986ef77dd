// The recipe corpora: every bad recipe fails with its expected message at
// its expected line, in-process and through the real `bagua validate`;
// every good recipe (and every example in recipes/) is valid.
//
// One test per corpus and mode, looping over the files (each failure names
// its file): the bagua binary takes about half a second to start (LibTorch),
// so its runs go in parallel and ctest starts few processes.
#include "recipe/recipe_test_util.h"

#include <gtest/gtest.h>

#include <future>

namespace bagua::testing {
namespace {

std::vector<std::string> good_files() {
  std::vector<std::string> files = yaml_files("tests/fixtures/recipes/good");
  for (const auto& f : yaml_files("recipes")) files.push_back(f);
  return files;
}

// Runs `fn` over `items`, a few at a time.
template <typename T, typename Fn>
auto parallel_map(const std::vector<T>& items, Fn fn) {
  using R = decltype(fn(items[0]));
  std::vector<R> out(items.size());
  const size_t kWidth = 4;
  for (size_t start = 0; start < items.size(); start += kWidth) {
    std::vector<std::future<R>> running;
    for (size_t i = start; i < std::min(items.size(), start + kWidth); ++i)
      running.push_back(std::async(std::launch::async, fn, items[i]));
    for (size_t i = 0; i < running.size(); ++i) out[start + i] = running[i].get();
  }
  return out;
}

TEST(RecipeCorpus, HasAtLeastFortyBadRecipesEachWithAnExpectation) {
  auto files = yaml_files("tests/fixtures/recipes/bad");
  EXPECT_GE(files.size(), 40u);
  for (const auto& f : files) EXPECT_FALSE(parse_case(f).expect.empty()) << f << ": no '# expect: LINE: fragment'";
}

TEST(RecipeCorpus, BadRecipesReportTheirErrorsInProcess) {
  for (const auto& path : yaml_files("tests/fixtures/recipes/bad")) {
    SCOPED_TRACE(path);
    CorpusCase c = parse_case(path);
    ScopedEnv env(c.env);
    try {
      load_recipe(c.path, c.overrides);
      ADD_FAILURE() << "accepted";
    } catch (const RecipeError& e) {
      for (const auto& want : c.expect) {
        bool found = false;
        for (const auto& d : e.diagnostics()) found = found || line_matches(d.to_string(), want);
        EXPECT_TRUE(found) << "expected line " << want.line << " with \"" << want.fragment << "\"; got:\n"
                           << e.what();
      }
      for (size_t i = 1; i < e.diagnostics().size(); ++i) {  // sorted within each file
        const auto& a = e.diagnostics()[i - 1];
        const auto& b = e.diagnostics()[i];
        if (a.file == b.file) {
          EXPECT_LE(std::make_pair(a.line, a.column), std::make_pair(b.line, b.column));
        }
      }
    }
  }
}

TEST(RecipeCorpus, BaguaValidateExitsTwoWithTheErrorForEveryBadRecipe) {
  auto files = yaml_files("tests/fixtures/recipes/bad");
  auto results = parallel_map(files, [](const std::string& path) {
    CorpusCase c = parse_case(path);
    std::vector<std::string> args{"validate", c.path};
    for (const auto& o : c.overrides) {
      args.push_back("--set");
      args.push_back(o);
    }
    return run_bagua(args, c.env);
  });
  for (size_t i = 0; i < files.size(); ++i) {
    SCOPED_TRACE(files[i]);
    const CommandResult& r = results[i];
    EXPECT_EQ(r.exit_code, 2) << r.output;
    for (const auto& want : parse_case(files[i]).expect) {
      bool found = false;
      for (const auto& line : r.lines()) found = found || line_matches(line, want);
      EXPECT_TRUE(found) << "expected line " << want.line << " with \"" << want.fragment << "\"; got:\n"
                         << r.output;
    }
    EXPECT_NE(r.output.find("invalid recipe"), std::string::npos) << r.output;
  }
}

TEST(RecipeCorpus, GoodRecipesLoadInProcess) {
  for (const auto& path : good_files()) {
    SCOPED_TRACE(path);
    try {
      Recipe r = load_recipe(path);
      EXPECT_FALSE(r.name.empty());
      EXPECT_FALSE(r.optimizers.empty());
    } catch (const RecipeError& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

TEST(RecipeCorpus, BaguaValidateExitsZeroWithOneLineSummaryForEveryGoodRecipe) {
  auto files = good_files();
  auto results = parallel_map(files, [](const std::string& path) { return run_bagua({"validate", path}); });
  for (size_t i = 0; i < files.size(); ++i) {
    SCOPED_TRACE(files[i]);
    const CommandResult& r = results[i];
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::vector<std::string> summary;
    for (const auto& l : r.lines())
      if (l.find("(note)") == std::string::npos) summary.push_back(l);
    ASSERT_EQ(summary.size(), 1u) << r.output;
    EXPECT_NE(summary[0].find("valid recipe"), std::string::npos) << r.output;
  }
}

// The resolved YAML is itself a recipe that loads to the same tree.
TEST(RecipeCorpus, PrintedRecipesLoadToTheSameTree) {
  for (const auto& path : good_files()) {
    SCOPED_TRACE(path);
    Recipe first = load_recipe(path);
    std::string printed = resolved_recipe_yaml(first);
    std::string copy = ::testing::TempDir() + "/" + test_name(path) + ".resolved.yaml";
    std::ofstream(copy) << printed;
    try {
      Recipe second = load_recipe(copy);
      nlohmann::json a = first.resolved, b = second.resolved;
      a.erase("name");
      b.erase("name");
      EXPECT_EQ(a, b) << printed;
    } catch (const RecipeError& e) {
      ADD_FAILURE() << e.what() << "\n" << printed;
    }
  }
}

}  // namespace
}  // namespace bagua::testing
