// `bagua recipes` and `bagua diff`: the catalog on a temporary
// BAGUA_RECIPE_PATH, pins, copies, and differences of every kind between
// recipes, each side naming where it set the key. The library behind them
// is tested in tests/recipe/sharing_test.cpp; run directories in
// tests/train/provenance_test.cpp.
#include <bagua/exit_codes.h>
#include <bagua/sha256.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct Said {
  int exit_code = -1;
  std::string out;  // stdout
  std::string all;  // stdout then stderr
};

class SharingCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("bagua-sharing-cli-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "catalog");
    const fs::path fixtures = fs::path(BAGUA_SOURCE_DIR) / "tests/fixtures/recipes";
    write("catalog/team-base.yaml",
          "description: the team's base\n"
          "model: {torchscript: " + (fixtures / "models/tiny.pt").string() + "}\n"
          "data:\n"
          "  train: {format: csv, path: " + (fixtures / "data/tiny.csv").string() + ", target_column: label}\n"
          "  sampler: {type: distributed, shuffle: true, seed: 0}\n"
          "optimizers:\n"
          "  - {type: sgd, lr: 0.1}\n"
          "train: {epochs: 2}\n");
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  fs::path write(const std::string& relative, const std::string& text) {
    fs::path p = dir_ / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p;
  }
  Said bagua(const std::string& args) {
    static int calls = 0;
    const fs::path out = dir_ / ("out-" + std::to_string(calls));
    const fs::path err = dir_ / ("err-" + std::to_string(calls++));
    const std::string cmd = "cd " + dir_.string() + " && BAGUA_RECIPE_PATH=" + (dir_ / "catalog").string() + " " +
                            BAGUA_CLI + " " + args + " > " + out.string() + " 2> " + err.string() + " < /dev/null";
    const int status = std::system(cmd.c_str());
    Said s;
    s.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::stringstream o, e;
    o << std::ifstream(out).rdbuf();
    e << std::ifstream(err).rdbuf();
    s.out = o.str();
    s.all = s.out + e.str();
    return s;
  }
  static bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }
  fs::path dir_;
};

TEST_F(SharingCli, ListShowsTheCatalogWithDescriptionsAndTheShippedRecipes) {
  write("catalog/fast.yaml", "description: fast one\nextends: team-base.yaml\nalgorithm: {name: bytegrad}\n");
  Said list = bagua("recipes list");
  ASSERT_EQ(list.exit_code, 0) << list.all;
  EXPECT_TRUE(has(list.out, (dir_ / "catalog").string() + ":")) << list.out;
  EXPECT_TRUE(has(list.out, "fast")) << list.out;
  EXPECT_TRUE(has(list.out, "bytegrad")) << list.out;
  EXPECT_TRUE(has(list.out, "fast one")) << list.out;
  EXPECT_TRUE(has(list.out, "the team's base")) << list.out;
  EXPECT_TRUE(has(list.out, "fashion-mnist-mlp")) << "the shipped recipes follow: " << list.out;
  Said json = bagua("recipes list --json");
  ASSERT_EQ(json.exit_code, 0) << json.all;
  auto entries = nlohmann::json::parse(json.out);
  bool found = false;
  for (const auto& e : entries)
    if (e["name"] == "fast") {
      found = true;
      EXPECT_EQ(e["algorithm"], "bytegrad");
      EXPECT_EQ(e["description"], "fast one");
      EXPECT_EQ(e["model"].get<std::string>().substr(e["model"].get<std::string>().size() - 7), "tiny.pt");
    }
  EXPECT_TRUE(found) << json.out;
}

TEST_F(SharingCli, ShowGivesEachKeyTheFileAndLineThatSetIt) {
  write("catalog/fast.yaml", "extends: team-base.yaml\nalgorithm: {name: bytegrad}\n");
  Said show = bagua("recipes show fast --set train.epochs=7");
  ASSERT_EQ(show.exit_code, 0) << show.all;
  const std::string fast = (dir_ / "catalog/fast.yaml").string(), base = (dir_ / "catalog/team-base.yaml").string();
  std::map<std::string, std::string> from;
  std::istringstream in(show.out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    from[line.substr(0, line.find(':'))] = line.substr(line.rfind("# ") + 2);
  }
  EXPECT_EQ(from["algorithm.name"], fast + ":2:19") << show.out;
  EXPECT_EQ(from["optimizers[0].lr"], base + ":7:21") << show.out;
  EXPECT_EQ(from["train.epochs"], "--set train.epochs=7") << show.out;
  EXPECT_EQ(from["data.batch_size"], "(default)") << show.out;
  EXPECT_TRUE(has(show.out, "# base   " + base + "  file sha256 ")) << show.out;
  Said missing = bagua("recipes show no-such-recipe");
  EXPECT_EQ(missing.exit_code, bagua::kExitInvalidInput);
  EXPECT_TRUE(has(missing.all, "no catalog recipe of that name")) << missing.all;
}

TEST_F(SharingCli, CopyMakesAStandaloneRecipeThatValidatesWhereItLands) {
  fs::create_directories(dir_ / "elsewhere");
  Said copy = bagua("recipes copy fashion-mnist-cnn elsewhere/mine.yaml");
  ASSERT_EQ(copy.exit_code, 0) << copy.all;
  Said valid = bagua("validate elsewhere/mine.yaml");
  EXPECT_EQ(valid.exit_code, 0) << valid.all;
  EXPECT_TRUE(has(valid.out, "valid recipe mine")) << valid.out;
  // Both limits of the length are said: max_steps alone read as "30 steps"
  // when the epochs may end the run first.
  Said capped = bagua("validate elsewhere/mine.yaml --set train.max_steps=30 --set train.epochs=2");
  EXPECT_TRUE(has(capped.out, ", up to 30 steps within 2 epochs, ")) << capped.out;
  // Its runs go to its own directory, not the shipped recipe's.
  std::stringstream text;
  text << std::ifstream(dir_ / "elsewhere/mine.yaml").rdbuf();
  EXPECT_TRUE(has(text.str(), "dir: runs/mine\n")) << text.str();
  EXPECT_FALSE(has(text.str(), "runs/fashion-mnist-cnn")) << text.str();
  // The copy means what the shipped recipe means, apart from its name and output.
  Said same = bagua("diff fashion-mnist-cnn elsewhere/mine.yaml --ignore name --ignore output");
  EXPECT_EQ(same.exit_code, 0) << same.all;
  Said again = bagua("recipes copy fashion-mnist-cnn elsewhere/mine.yaml");
  EXPECT_EQ(again.exit_code, bagua::kExitInvalidInput);
  EXPECT_TRUE(has(again.all, "--force")) << again.all;
  EXPECT_EQ(bagua("recipes copy fashion-mnist-cnn elsewhere/mine.yaml --force").exit_code, 0);
}

// checkpoint.resume names a checkpoint relative to the recipe: a copy
// elsewhere still finds it (it said "relative paths rebased" and then failed
// validation).
TEST_F(SharingCli, CopyRebasesACheckpointToResumeFrom) {
  fs::create_directories(dir_ / "src/ckpt/step-00000008");
  write("src/ft.yaml", "extends: " + std::string(BAGUA_SOURCE_DIR) +
                           "/recipes/fashion-mnist-mlp.yaml\nname: ft\ncheckpoint: {resume: ckpt/step-00000008}\n");
  ASSERT_EQ(bagua("validate src/ft.yaml").exit_code, 0);
  fs::create_directories(dir_ / "elsewhere");
  Said copy = bagua("recipes copy src/ft.yaml elsewhere/ft2.yaml");
  ASSERT_EQ(copy.exit_code, 0) << copy.all;
  std::stringstream text;
  text << std::ifstream(dir_ / "elsewhere/ft2.yaml").rdbuf();
  EXPECT_TRUE(has(text.str(), "resume: ../src/ckpt/step-00000008")) << text.str();
  Said valid = bagua("validate elsewhere/ft2.yaml");
  EXPECT_EQ(valid.exit_code, 0) << valid.all;
}

TEST_F(SharingCli, PinThenAnEditedBaseIsRefusedAndCheckSaysSo) {
  write("exp.yaml", "extends:\n  - {recipe: team-base}\ntrain: {epochs: 4}\n");
  EXPECT_EQ(bagua("recipes pin exp.yaml --check").exit_code, 1) << "not pinned yet";
  Said pin = bagua("recipes pin exp.yaml");
  ASSERT_EQ(pin.exit_code, 0) << pin.all;
  EXPECT_TRUE(has(pin.out, "pinned " + (dir_ / "catalog/team-base.yaml").string())) << pin.out;
  EXPECT_EQ(bagua("recipes pin exp.yaml --check").exit_code, 0);
  EXPECT_EQ(bagua("validate exp.yaml").exit_code, 0);
  std::ofstream(dir_ / "catalog/team-base.yaml", std::ios::app) << "# edited upstream\n";
  Said refused = bagua("validate exp.yaml");
  EXPECT_EQ(refused.exit_code, bagua::kExitInvalidInput);
  EXPECT_TRUE(has(refused.all, "exp.yaml:2:")) << refused.all;
  EXPECT_TRUE(has(refused.all, "pinned base " + (dir_ / "catalog/team-base.yaml").string() + " has changed"))
      << refused.all;
  EXPECT_EQ(bagua("recipes pin exp.yaml --check").exit_code, 1);
  EXPECT_EQ(bagua("recipes pin exp.yaml").exit_code, 0);
  EXPECT_EQ(bagua("validate exp.yaml").exit_code, 0);
}

// A file's SHA-256 (the library's, which tests/recipe checks equals sha256sum's).
std::string sha256sum(const fs::path& p) { return bagua::sha256_file(p.string()); }

// A pin check in CI fails naming each base it fails for, and why.
TEST_F(SharingCli, PinCheckNamesEachStaleOrUnpinnedBase) {
  write("other.yaml", "train: {seed: 3}\n");
  write("exp.yaml", "extends:\n  - {recipe: team-base}\n  - other.yaml\ntrain: {epochs: 4}\n");
  const fs::path base = dir_ / "catalog/team-base.yaml";
  const std::string pinned = sha256sum(base);
  Said pin = bagua("recipes pin exp.yaml");
  ASSERT_EQ(pin.exit_code, 0) << pin.all;
  EXPECT_TRUE(has(pin.out, "pinned " + base.string() + " (file sha256 " + pinned + ")\n")) << pin.out;
  std::ofstream(base, std::ios::app) << "# edited upstream\n";
  const std::string now = sha256sum(base);
  Said check = bagua("recipes pin exp.yaml --check");
  EXPECT_EQ(check.exit_code, 1) << check.all;
  EXPECT_TRUE(has(check.out, "stale pin: " + base.string() + ": pinned file sha256 " + pinned +
                                 ", its file sha256 now " + now + "\n")) << check.out;
  EXPECT_FALSE(has(check.out, "other.yaml")) << "pinned and current: " << check.out;
  write("loose.yaml", "extends: [other.yaml]\n");
  Said loose = bagua("recipes pin loose.yaml --check");
  EXPECT_EQ(loose.exit_code, 1) << loose.all;
  EXPECT_TRUE(has(loose.out, "not pinned: other.yaml (file sha256 " + sha256sum(dir_ / "other.yaml") + ")\n"))
      << loose.out;
}

// A stale pin is when a reviewer needs diff most: it compares the base as it
// is now and warns, naming the base with its pinned and current file sha256;
// running (validate, run) still refuses it.
TEST_F(SharingCli, DiffWithAStalePinShowsTheDifferencesAndWarns) {
  write("exp.yaml", "extends:\n  - {recipe: team-base}\ntrain: {epochs: 4}\n");
  ASSERT_EQ(bagua("recipes pin exp.yaml").exit_code, 0);
  const fs::path base = dir_ / "catalog/team-base.yaml";
  const std::string pinned = sha256sum(base);
  std::stringstream text;
  text << std::ifstream(base).rdbuf();
  std::string edited = text.str();
  edited.replace(edited.find("lr: 0.1"), 7, "lr: 0.3");
  std::ofstream(base) << edited;
  const std::string now = sha256sum(base);
  Said d = bagua("diff team-base exp.yaml");
  EXPECT_EQ(d.exit_code, 1) << d.all;
  EXPECT_TRUE(has(d.out, "~ train.epochs: 2 -> 4\n")) << d.all;
  EXPECT_FALSE(has(d.out, "optimizers[0].lr")) << "both sides read the base as it is now: " << d.out;
  EXPECT_TRUE(has(d.all, "warning: B (exp.yaml): pinned base " + base.string() +
                             " has changed since it was pinned (exp.yaml:2:")) << d.all;
  EXPECT_TRUE(has(d.all, "pinned file sha256 " + pinned + ", current file sha256 " + now)) << d.all;
  Said j = bagua("diff team-base exp.yaml --json");
  EXPECT_EQ(j.exit_code, 1) << j.all;
  const auto parsed = nlohmann::json::parse(j.out);
  ASSERT_EQ(parsed["b"]["stale_pins"].size(), 1u) << j.out;
  EXPECT_EQ(parsed["b"]["stale_pins"][0]["base"], base.string());
  EXPECT_EQ(parsed["b"]["stale_pins"][0]["pinned_file_sha256"], pinned);
  EXPECT_EQ(parsed["b"]["stale_pins"][0]["current_file_sha256"], now);
  EXPECT_TRUE(parsed["a"]["stale_pins"].empty());
  // Each digest says what it is the hash of.
  EXPECT_EQ(parsed["b"]["file_sha256"], sha256sum(dir_ / "exp.yaml"));
  EXPECT_EQ(parsed["b"]["canonical_recipe_sha256"].get<std::string>().size(), 64u);
  EXPECT_FALSE(parsed["b"].contains("sha256")) << j.out;
  Said refused = bagua("validate exp.yaml");
  EXPECT_EQ(refused.exit_code, bagua::kExitInvalidInput) << refused.all;
  EXPECT_TRUE(has(refused.all, "its file SHA-256 is " + now + ", pinned " + pinned)) << refused.all;
}

// One pair per kind of change: the key named, both values, both origins.
TEST_F(SharingCli, DiffNamesEveryKindOfChangeWithBothValuesAndOrigins) {
  write("other-base.yaml", "extends: catalog/team-base.yaml\ntrain: {seed: 9}\n");
  const fs::path a = write("a.yaml", "extends: catalog/team-base.yaml\nname: r\n");
  struct Case {
    std::string what, b_text, extra, path, value_line, b_from;
  };
  const std::string b = "b.yaml";  // as named on the command line
  const std::vector<Case> cases = {
      {"scalar", "extends: catalog/team-base.yaml\nname: r\ndata: {batch_size: 8}\n", "", "data.batch_size",
       "~ data.batch_size: 64 -> 8", b + ":3:20"},
      {"list", "extends: catalog/team-base.yaml\nname: r\nmodel: {ignore_params: [fc.bias]}\n", "",
       "model.ignore_params[0]", "+ model.ignore_params[0]: (absent) -> \"fc.bias\"", b + ":3:25"},
      {"mapping", "extends: catalog/team-base.yaml\nname: r\ndata: {sampler: {type: distributed, seed: 4}}\n", "",
       "data.sampler.seed", "~ data.sampler.seed: 0 -> 4", b + ":3:43"},
      {"added", "extends: catalog/team-base.yaml\nname: r\ndescription: now described\n", "", "description",
       "+ description: (absent) -> \"now described\"", b + ":3:14"},
      {"removed", "extends: catalog/team-base.yaml\nname: r\nalgorithm: {name: decentralized}\n", "",
       "algorithm.average", "- algorithm.average: true -> (absent)", "absent"},
      {"via extends", "extends: other-base.yaml\nname: r\n", "", "train.seed", "~ train.seed: 0 -> 9",
       "other-base.yaml:2:15"},
      {"via --set", "extends: catalog/team-base.yaml\nname: r\n", "--set-b train.epochs=3", "train.epochs",
       "~ train.epochs: 2 -> 3", "--set train.epochs=3"},
  };
  for (const auto& c : cases) {
    std::ofstream(dir_ / b) << c.b_text;
    Said d = bagua("diff a.yaml b.yaml " + c.extra);
    EXPECT_EQ(d.exit_code, 1) << c.what << ": " << d.all;
    EXPECT_TRUE(has(d.out, c.value_line)) << c.what << ": " << d.out;
    EXPECT_TRUE(has(d.out, "    B: " + c.b_from + "\n")) << c.what << ": " << d.out;
    Said j = bagua("diff a.yaml b.yaml --json " + c.extra);
    EXPECT_EQ(j.exit_code, 1) << c.what;
    auto parsed = nlohmann::json::parse(j.out);
    EXPECT_FALSE(parsed["equal"].get<bool>());
    bool named = false;
    for (const auto& item : parsed["differences"])
      if (item["path"] == c.path) {
        named = true;
        EXPECT_EQ(item["b_from"], c.b_from) << c.what;
      }
    EXPECT_TRUE(named) << c.what << ": " << j.out;
  }
  // A's batch_size is the schema's default.
  std::ofstream(dir_ / b) << "extends: catalog/team-base.yaml\nname: r\ndata: {batch_size: 8}\n";
  EXPECT_TRUE(has(bagua("diff a.yaml b.yaml").out, "    A: default\n"));
  // Written differently, meaning the same: equal, exit 0.
  std::ofstream(dir_ / b) << "# same meaning\nname: r\ntrain:\n  epochs: 2\nextends: [catalog/team-base.yaml]\n";
  Said same = bagua("diff a.yaml b.yaml");
  EXPECT_EQ(same.exit_code, 0) << same.all;
  EXPECT_TRUE(has(same.out, "same resolved recipe")) << same.out;
  // A side that is not a recipe is exit 2.
  EXPECT_EQ(bagua("diff a.yaml missing.yaml").exit_code, bagua::kExitInvalidInput);
}

// --ignore leaves out a key and what is under it, whole keys only, in either
// index form; a malformed path is a user error, not a silent no-op.
TEST_F(SharingCli, DiffIgnoresWholeKeysAndRefusesAMalformedPath) {
  write("a.yaml", "extends: catalog/team-base.yaml\nname: r\n");
  write("b.yaml", "extends: catalog/team-base.yaml\nname: r\ndata: {batch_size: 8}\n"
                  "optimizers: [{type: sgd, lr: 0.5}]\n");
  Said prefix_only = bagua("diff a.yaml b.yaml --ignore data.batch --ignore optimizers[0]");
  EXPECT_EQ(prefix_only.exit_code, 1) << prefix_only.all;
  EXPECT_TRUE(has(prefix_only.out, "~ data.batch_size: 64 -> 8")) << prefix_only.out;
  EXPECT_FALSE(has(prefix_only.out, "optimizers[0].lr")) << prefix_only.out;
  Said other_item = bagua("diff a.yaml b.yaml --ignore data --ignore optimizers[1]");
  EXPECT_EQ(other_item.exit_code, 1) << other_item.all;
  EXPECT_TRUE(has(other_item.out, "~ optimizers[0].lr: 0.1 -> 0.5")) << other_item.out;
  EXPECT_FALSE(has(other_item.out, "data.batch_size")) << other_item.out;
  Said both = bagua("diff a.yaml b.yaml --ignore data.batch_size --ignore optimizers.0");
  EXPECT_EQ(both.exit_code, 0) << both.all;
  Said malformed = bagua("diff a.yaml b.yaml --ignore data..batch_size");
  EXPECT_EQ(malformed.exit_code, bagua::kExitInvalidInput) << malformed.all;
  EXPECT_TRUE(has(malformed.all, "--ignore data..batch_size: empty key in path")) << malformed.all;
}

// A repository's recipes in one call, as a CI job checks them: every
// recipe is reported (the bad one does not hide the others), a base that
// another recipe of the call extends and that lacks required keys (a
// fragment) is checked through it, a whole recipe that is also a base is
// checked as a recipe, and the exit status is 2 if any recipe is invalid.
TEST_F(SharingCli, ValidateTakesAWholeRepositoryAndChecksFragmentsThroughTheirRecipes) {
  write("repo/team/whole.yaml", "extends: ../../catalog/team-base.yaml\ntrain: {epochs: 3}\n");
  write("repo/team/partial.yaml", "train: {epochs: 2}\n");
  write("repo/team/badpart.yaml", "data: {batch_size: 0}\n");
  write("repo/fast.yaml", "extends: team/whole.yaml\nalgorithm: {name: bytegrad}\n");
  write("repo/broken.yaml", "extends: team/whole.yaml\ndata: {batch_size: 0}\nalgorithm: {name: nope}\n");
  write("repo/also.yaml", "extends: [team/whole.yaml, team/partial.yaml]\n");
  write("repo/usesbad.yaml", "extends: [team/whole.yaml, team/badpart.yaml]\n");
  Said all = bagua("validate repo/broken.yaml repo/fast.yaml repo/team/whole.yaml repo/team/partial.yaml "
                   "repo/also.yaml repo/missing.yaml");
  EXPECT_EQ(all.exit_code, 2) << all.all;
  EXPECT_TRUE(has(all.all, "repo/broken.yaml:2:20: data.batch_size")) << all.all;
  EXPECT_TRUE(has(all.all, "repo/broken.yaml:3:19: algorithm.name")) << all.all;
  EXPECT_TRUE(has(all.out, "repo/fast.yaml: valid recipe fast (bytegrad")) << "the bad one hides nothing: " << all.all;
  EXPECT_TRUE(has(all.out, "repo/also.yaml: valid recipe also")) << all.all;
  EXPECT_TRUE(has(all.out, "repo/team/whole.yaml: valid recipe whole")) << "a whole base is a recipe: " << all.all;
  EXPECT_TRUE(has(all.out, "repo/team/partial.yaml: a base (alone it lacks data, model, optimizers), checked "
                           "through repo/also.yaml"))
      << all.all;
  EXPECT_FALSE(has(all.all, "repo/team/partial.yaml:1:1")) << "a fragment is not checked alone: " << all.all;
  EXPECT_TRUE(has(all.all, "repo/missing.yaml")) << all.all;
  EXPECT_TRUE(has(all.all, "6 files: 3 valid, 2 invalid, 1 base checked through the recipes extending them"))
      << all.all;

  Said good = bagua("validate repo/also.yaml ./repo/team/partial.yaml");
  EXPECT_EQ(good.exit_code, 0) << "./repo/team/partial.yaml is the base also.yaml names: " << good.all;
  EXPECT_TRUE(has(good.out, "./repo/team/partial.yaml: a base")) << good.all;
  Said alone = bagua("validate repo/team/partial.yaml repo/fast.yaml");
  EXPECT_EQ(alone.exit_code, 2) << "a fragment no recipe of the call extends is checked as a recipe: " << alone.all;
  Said bad_fragment = bagua("validate repo/usesbad.yaml repo/team/badpart.yaml");
  EXPECT_EQ(bad_fragment.exit_code, 2) << bad_fragment.all;
  EXPECT_TRUE(has(bad_fragment.all, "repo/team/badpart.yaml:1:20: data.batch_size")) << bad_fragment.all;
  EXPECT_TRUE(has(bad_fragment.all, "2 files: 0 valid, 2 invalid"))
      << "a base with a wrong value, not only missing keys, is reported itself: " << bad_fragment.all;
  Said print = bagua("validate repo/fast.yaml repo/also.yaml --print");
  EXPECT_EQ(print.exit_code, 2) << print.all;
  EXPECT_TRUE(has(print.all, "--print takes one recipe")) << print.all;
}

}  // namespace
