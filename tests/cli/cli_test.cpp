// The `bagua` command line itself (cli/): its subcommands, its exit codes
// (bagua/exit_codes.h, docs/cli.md) and how errors reach the user. The
// engine's behaviour behind each command is tested in its own area.
#include <bagua/exit_codes.h>

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct Outcome {
  int exit_code = -1;
  std::string output;
};

Outcome bagua(const std::string& args) {
  static int calls = 0;
  const fs::path out =
      fs::temp_directory_path() / ("bagua-cli-" + std::to_string(getpid()) + "-" + std::to_string(calls++) + ".out");
  const std::string cmd = std::string(BAGUA_CLI) + " " + args + " > " + out.string() + " 2>&1 < /dev/null";
  const int status = std::system(cmd.c_str());
  Outcome o;
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(out);
  std::stringstream s;
  s << in.rdbuf();
  o.output = s.str();
  fs::remove(out);
  return o;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

TEST(Cli, HelpListsEveryCommand) {
  const Outcome o = bagua("--help");
  EXPECT_EQ(o.exit_code, bagua::kExitOk) << o.output;
  for (const char* command : {"run", "validate", "schema", "plan", "bench", "report", "launch", "store"}) {
    EXPECT_TRUE(has(o.output, command)) << command << " missing from:\n" << o.output;
  }
}

TEST(Cli, VersionAndBadUsage) {
  const Outcome version = bagua("--version");
  EXPECT_EQ(version.exit_code, bagua::kExitOk);
  EXPECT_TRUE(has(version.output, "bagua 0.")) << version.output;
  EXPECT_EQ(bagua("").exit_code, bagua::kExitInvalidInput) << "a subcommand is required";
  const Outcome unknown = bagua("frobnicate");
  EXPECT_EQ(unknown.exit_code, bagua::kExitInvalidInput) << unknown.output;
  EXPECT_EQ(bagua("run --no-such-flag x.yaml").exit_code, bagua::kExitInvalidInput);
  // A flag of another command, and an empty argument: in the form of every
  // error, with where to look.
  const Outcome other = bagua("validate x.yaml --nproc-per-node 3");
  EXPECT_EQ(other.exit_code, bagua::kExitInvalidInput) << other.output;
  EXPECT_TRUE(has(other.output, "bagua validate: error: The following argument was not expected: --nproc-per-node"))
      << other.output;
  EXPECT_TRUE(has(other.output, "a recipe key is changed with --set KEY=VALUE")) << other.output;
  const Outcome empty = bagua("run x.yaml ''");
  EXPECT_TRUE(has(empty.output, "bagua run: error: The following argument was not expected: \"\" (an empty "
                                "argument)"))
      << empty.output;
  // validate takes several recipes: an empty one (an unset variable) is named as such.
  const Outcome empty_recipe = bagua("validate ''");
  EXPECT_EQ(empty_recipe.exit_code, bagua::kExitInvalidInput) << empty_recipe.output;
  EXPECT_TRUE(has(empty_recipe.output, "\"\" (an empty argument) is not a recipe")) << empty_recipe.output;
  // A runtime that cannot be run is the environment's fault: 2, not 1.
  ::setenv("BAGUA_RUNTIME", "/nonexistent/bagua-runtime", 1);
  const Outcome no_runtime = bagua("run x.yaml");
  ::unsetenv("BAGUA_RUNTIME");
  EXPECT_EQ(no_runtime.exit_code, bagua::kExitInvalidInput) << no_runtime.output;
  EXPECT_TRUE(has(no_runtime.output, "bagua run: cannot run /nonexistent/bagua-runtime")) << no_runtime.output;
}

// A user error thrown by the engine becomes one line naming the command,
// and exit code 2.
TEST(Cli, AUserErrorIsOneLineAndExitCodeTwo) {
  const Outcome o = bagua("report /nonexistent/run-dir");
  EXPECT_EQ(o.exit_code, bagua::kExitInvalidInput) << o.output;
  EXPECT_TRUE(has(o.output, "bagua report: error:")) << o.output;
  EXPECT_TRUE(has(o.output, "/nonexistent/run-dir")) << o.output;
}

TEST(Cli, AnInvalidRecipeListsEveryMistakeAndExitsTwo) {
  const fs::path recipe = fs::temp_directory_path() / ("bagua-cli-bad-" + std::to_string(getpid()) + ".yaml");
  std::ofstream(recipe) << "name: bad\nmodel: {torchscript: /nonexistent.pt}\noptimizers: [{type: sgd}]\n";
  const Outcome o = bagua("validate " + recipe.string());
  fs::remove(recipe);
  EXPECT_EQ(o.exit_code, bagua::kExitInvalidInput) << o.output;
  EXPECT_TRUE(has(o.output, "invalid recipe")) << o.output;
  EXPECT_TRUE(has(o.output, "optimizers[0]")) << "the missing lr is named:\n" << o.output;
  EXPECT_TRUE(has(o.output, "data")) << "the missing data is named:\n" << o.output;
}

}  // namespace
