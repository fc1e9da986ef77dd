// docs/recipes.md stays in step with the schema: every key the schema
// defines (in every variant) appears in the reference as `key.path`.
#include "recipe/recipe_test_util.h"
#include "recipe/stages.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

namespace bagua::testing {
namespace {

using nlohmann::json;

const json& resolve(const json& s) {
  const json* cur = &s;
  while (cur->is_object() && cur->contains("$ref")) {
    std::string ref = (*cur)["$ref"].get<std::string>();
    cur = &recipe::recipe_schema().at(json::json_pointer(ref.substr(1)));
  }
  return *cur;
}

void collect(const json& schema, const std::string& path, std::set<std::string>& out) {
  const json& s = resolve(schema);
  if (!s.is_object()) return;
  if (s.contains("properties")) {
    for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) {
      std::string key = path.empty() ? it.key() : path + "." + it.key();
      out.insert(key);
      if (key != "data.eval") collect(*it, key, out);  // data.eval takes data.train's keys
    }
  }
  if (s.contains("items")) collect(s["items"], path + "[]", out);
  for (const char* k : {"anyOf", "allOf"})
    if (s.contains(k))
      for (const auto& b : s[k]) collect(b.contains("then") ? b["then"] : b, path, out);
}

TEST(RecipeDocs, ReferenceNamesEverySchemaKey) {
  std::set<std::string> keys;
  collect(recipe::recipe_schema(), "", keys);
  ASSERT_GT(keys.size(), 80u);
  std::string docs = read_text(source_path("docs/recipes.md"));
  for (const auto& key : keys)
    EXPECT_NE(docs.find("`" + key + "`"), std::string::npos)
        << key << " is in the schema but not in docs/recipes.md (run scripts/gen_recipe_docs.py)";
}

// Podman caches a WORKDIR, COPY or ADD layer on the instruction's text, not
// on the value of a build argument it names, so `WORKDIR ${BAGUA_SRC}` built
// with one path was reused for another and the build ran where nothing had
// been copied (issue 26: the README's `podman build -t bagua .` failed
// after scripts/test.sh's image build). No instruction that places files
// may name a build argument; RUN, whose environment has the value, may.
TEST(Dockerfile, NoInstructionThatPlacesFilesNamesABuildArgument) {
  std::ifstream in(std::string(BAGUA_SOURCE_DIR) + "/Dockerfile");
  ASSERT_TRUE(in) << "no Dockerfile";
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    for (const char* op : {"WORKDIR ", "COPY ", "ADD "}) {
      if (line.rfind(op, 0) != 0) continue;
      ++checked;
      EXPECT_EQ(line.find('$'), std::string::npos) << "the Dockerfile's `" << line << "` names a build argument";
    }
  }
  EXPECT_GE(checked, 4) << "expected the package stages' COPYs, the sources' COPY and the runtime's COPY and WORKDIR";
}

// The README's "Your own model" (issue 42, edge 10): the commands say
// `bagua`, as the docs do, after saying how to put it on PATH; and what a
// model must be is there, not only in docs/data.md.
TEST(Readme, YourOwnModelSaysHowToGetBaguaAndWhatAModelReceivesAndReturns) {
  std::ifstream in(std::string(BAGUA_SOURCE_DIR) + "/README.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  const size_t from = readme.find("## Your own model");
  ASSERT_NE(from, std::string::npos);
  const std::string section = readme.substr(from, readme.find("\n## ", from + 1) - from);
  for (const char* needed : {"export PATH=\"$PWD/build/cli:$PATH\"", "cmake --install build", "torch.jit.script(",
                             "forward(input)", "input_shape: [1, 28, 28]", "model.loss", "bagua recipes copy"}) {
    EXPECT_NE(section.find(needed), std::string::npos) << "the section does not say " << needed;
  }
  std::istringstream lines(section);
  std::string line;
  int commands = 0;
  while (std::getline(lines, line)) {
    EXPECT_NE(line.rfind("build/cli/bagua ", 0), 0u) << "a command by its build path: " << line;
    if (line.rfind("bagua ", 0) == 0) ++commands;
  }
  EXPECT_GE(commands, 5);
}

}  // namespace
}  // namespace bagua::testing
