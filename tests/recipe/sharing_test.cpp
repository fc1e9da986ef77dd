// Recipes shared across teams, in the library: SHA-256 and its cache, what
// a loaded recipe records of its origin, pinned and catalog bases, the
// catalog, standalone copies, key-by-key differences and schema_version.
// (The commands over them are tested in tests/cli/sharing_cli_test.cpp.)
#include "recipe/recipe_test_util.h"

#include <bagua/provenance.h>
#include <bagua/recipe_catalog.h>
#include <bagua/sha256.h>

#include <gtest/gtest.h>

#include <unistd.h>

#include <random>

namespace bagua::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// sha256sum's verdict on a file (the reference the issue names).
std::string sha256sum_of(const fs::path& p) {
  CommandResult r;
  FILE* pipe = popen(("sha256sum " + shell_quote(p.string())).c_str(), "r");
  char buf[256] = {0};
  std::string out;
  while (fgets(buf, sizeof(buf), pipe)) out += buf;
  pclose(pipe);
  return out.substr(0, 64);
}

class Sharing : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = fs::temp_directory_path() / ("bagua-sharing-" + std::to_string(getpid()) + "-" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
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
  // A complete base recipe over the test fixtures (paths relative to it).
  fs::path write_base(const std::string& relative = "team/base.yaml") {
    fs::path p = dir_ / relative;
    fs::path fixtures = source_path("tests/fixtures/recipes");
    std::string model = fs::relative(fixtures / "models/tiny.pt", p.parent_path()).string();
    std::string data = fs::relative(fixtures / "data/tiny.csv", p.parent_path()).string();
    return write(relative, "# the team's base\n"
                           "description: the base\n"
                           "model: {torchscript: " + model + "}\n"
                           "data:\n  train: {format: csv, path: " + data + ", target_column: label}\n"
                           "optimizers:\n  - {type: sgd, lr: 0.1}\n"
                           "train: {epochs: 2}\n");
  }
  fs::path dir_;
};

TEST(Sha256, KnownDigestsInAnyPieces) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(sha256_hex(million), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // The same bytes in odd pieces (crossing the 64-byte blocks) give the same digest.
  Sha256 pieces;
  for (size_t at = 0, step = 1; at < million.size(); at += step, step = step * 7 % 193 + 1)
    pieces.update(million.substr(at, std::min(step, million.size() - at)));
  EXPECT_EQ(pieces.hex(), sha256_hex(million));
}

TEST_F(Sharing, FileDigestsEqualSha256sumAndAreCachedBySizeAndTime) {
  ScopedEnv env({{"BAGUA_HASH_CACHE", (dir_ / "cache.json").string()}});
  std::mt19937 rng(7);
  std::string bytes(3 * 1000 * 1000 + 17, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  fs::path file = write("data.bin", bytes);
  EXPECT_EQ(sha256_file(file.string()), sha256sum_of(file));
  bool hashed = false;
  EXPECT_EQ(cached_file_sha256(file.string(), &hashed), sha256sum_of(file));
  EXPECT_TRUE(hashed);
  EXPECT_EQ(cached_file_sha256(file.string(), &hashed), sha256sum_of(file));
  EXPECT_FALSE(hashed) << "the second call must come from the cache";
  EXPECT_TRUE(fs::exists(dir_ / "cache.json"));
  // Same size, new content and modification time: hashed again.
  bytes[5] ^= 1;
  std::ofstream(file, std::ios::binary) << bytes;
  fs::last_write_time(file, fs::last_write_time(file) + std::chrono::seconds(2));
  EXPECT_EQ(cached_file_sha256(file.string(), &hashed), sha256sum_of(file));
  EXPECT_TRUE(hashed);
  // Replaced by a file of the same size with the modification time kept (as
  // cp -p, rsync -a or tar x leave it): another inode, hashed again.
  EXPECT_EQ(cached_file_sha256(file.string(), &hashed), sha256sum_of(file));
  EXPECT_FALSE(hashed);
  const auto kept_time = fs::last_write_time(file);
  bytes[6] ^= 1;
  fs::path other = write("other.bin", bytes);
  fs::last_write_time(other, kept_time);
  fs::rename(other, file);
  ASSERT_EQ(fs::last_write_time(file), kept_time);
  EXPECT_EQ(cached_file_sha256(file.string(), &hashed), sha256sum_of(file));
  EXPECT_TRUE(hashed) << "a replaced file with its modification time preserved must not keep the old digest";
}

TEST_F(Sharing, ARecipeRecordsItsFilesOverridesVariablesAndPositions) {
  fs::path base = write_base();
  fs::path child = write("child.yaml", "extends: team/base.yaml\n"
                                       "optimizers:\n  - type: sgd\n    lr: ${SHARING_TEST_LR:-0.3}\n");
  Recipe r = load_recipe(child.string(), {"train.epochs=5"}, {});
  ASSERT_EQ(r.origin.files.size(), 2u);
  EXPECT_EQ(r.origin.files[0].path, child.string());
  EXPECT_EQ(r.origin.files[0].sha256, sha256sum_of(child));
  EXPECT_EQ(fs::path(r.origin.files[1].path), base.lexically_normal());
  EXPECT_EQ(r.origin.files[1].sha256, sha256sum_of(base));
  EXPECT_EQ(r.origin.overrides, std::vector<std::string>{"train.epochs=5"});
  EXPECT_EQ(r.origin.env_names, std::vector<std::string>{"SHARING_TEST_LR"});
  EXPECT_EQ(r.optimizers[0].lr, 0.3);
  EXPECT_EQ(r.origin.values.at("optimizers[0].lr").to_string(), child.string() + ":4:9");
  EXPECT_EQ(r.origin.values.at("train.epochs").file, "--set train.epochs=5");
  EXPECT_EQ(r.origin.values.count("data.batch_size"), 0u) << "a default has no origin";
  EXPECT_EQ(r.description, "") << "a description is not inherited";
  const std::vector<std::string> files{"data.train.path", "model.torchscript"};
  for (const auto& key : files)
    EXPECT_NE(std::find(r.origin.file_keys.begin(), r.origin.file_keys.end(), key), r.origin.file_keys.end()) << key;
}

TEST_F(Sharing, TheCanonicalHashIgnoresKeyOrderCommentsAndFormatting) {
  write_base();
  fs::path a = write("a.yaml", "name: same\nextends: team/base.yaml\ntrain: {epochs: 3, seed: 1}\n");
  fs::path b = write("b.yaml", "# reordered, block style, a comment\ntrain:\n  seed: 1\n  epochs: 3\n"
                               "extends: [team/base.yaml]\nname: same\n");
  fs::path c = write("c.yaml", "name: same\nextends: team/base.yaml\ntrain: {epochs: 4, seed: 1}\n");
  EXPECT_NE(sha256sum_of(a), sha256sum_of(b));
  EXPECT_EQ(canonical_recipe_sha256(load_recipe(a.string()).resolved),
            canonical_recipe_sha256(load_recipe(b.string()).resolved));
  EXPECT_NE(canonical_recipe_sha256(load_recipe(a.string()).resolved),
            canonical_recipe_sha256(load_recipe(c.string()).resolved));
}

TEST_F(Sharing, APinnedBaseThatChangedIsRefusedNamingIt) {
  fs::path base = write_base();
  const std::string sha = sha256sum_of(base);
  fs::path child = write("child.yaml", "extends:\n  - {path: team/base.yaml, sha256: " + sha + "}\n");
  EXPECT_NO_THROW(load_recipe(child.string()));
  std::ofstream(base, std::ios::app) << "# reviewed by another team\n";  // any byte changes it
  try {
    load_recipe(child.string());
    FAIL() << "an edited pinned base must be refused";
  } catch (const RecipeError& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u) << e.what();
    const Diagnostic& d = e.diagnostics()[0];
    EXPECT_EQ(d.file, child.string());
    EXPECT_EQ(d.line, 2);
    EXPECT_EQ(d.key_path, "extends[0].sha256");
    EXPECT_NE(d.message.find("pinned base " + (dir_ / "team/base.yaml").string() + " has changed"), std::string::npos)
        << d.message;
    EXPECT_NE(d.message.find(sha256sum_of(base)), std::string::npos) << "names the new digest: " << d.message;
  }
  // A malformed pin and a mapping naming no base.
  fs::path bad = write("bad.yaml", "extends:\n  - {path: team/base.yaml, sha256: abc}\n  - {sha256: " + sha + "}\n");
  try {
    load_recipe(bad.string());
    FAIL();
  } catch (const RecipeError& e) {
    const std::string all = e.what();
    EXPECT_NE(all.find("bad.yaml:2:"), std::string::npos) << all;
    EXPECT_NE(all.find("64 lowercase hex digits"), std::string::npos) << all;
    EXPECT_NE(all.find("bad.yaml:3:"), std::string::npos) << all;
    EXPECT_NE(all.find("exactly one of path"), std::string::npos) << all;
  }
}

TEST_F(Sharing, PinWritesCurrentDigestsAndKeepsEverythingElse) {
  fs::path base = write_base();
  fs::path other = write("team/other.yaml", "train: {seed: 3}\n");
  const std::string text =
      "# my experiment\n"
      "extends:\n"
      "  - team/base.yaml   # the team's\n"
      "  - {path: team/other.yaml}\n"
      "train: {epochs: 9}  # mine\n";
  fs::path child = write("child.yaml", text);
  PinResult pin = pin_recipe_bases(child.string());
  ASSERT_EQ(pin.bases.size(), 2u);
  EXPECT_EQ(pin.bases[1].current, sha256sum_of(other));
  EXPECT_EQ(pin.bases[1].pinned, "") << "not pinned before";
  EXPECT_NE(pin.text.find("  - {path: team/base.yaml, sha256: " + sha256sum_of(base) + "}   # the team's\n"),
            std::string::npos) << pin.text;
  EXPECT_NE(pin.text.find("  - {path: team/other.yaml, sha256: " + sha256sum_of(other) + "}\n"), std::string::npos)
      << pin.text;
  EXPECT_EQ(pin.text.substr(0, 16), "# my experiment\n");
  EXPECT_NE(pin.text.find("train: {epochs: 9}  # mine\n"), std::string::npos);
  std::ofstream(child) << pin.text;
  Recipe pinned = load_recipe(child.string());
  EXPECT_EQ(pinned.train.epochs, 9);
  EXPECT_EQ(pinned.train.seed, 3u);
  // The base changes: refused until pinned again; pinning again rewrites the digest.
  std::ofstream(other) << "train: {seed: 4}\n";
  EXPECT_THROW(load_recipe(child.string()), RecipeError);
  PinResult again = pin_recipe_bases(child.string());
  EXPECT_NE(again.text.find(sha256sum_of(other)), std::string::npos);
  ASSERT_EQ(again.bases.size(), 2u);
  EXPECT_FALSE(again.bases[0].stale());
  EXPECT_TRUE(again.bases[1].stale()) << "pinned " << again.bases[1].pinned << ", now " << again.bases[1].current;
  EXPECT_EQ(again.bases[1].pinned, pin.bases[1].current);
  std::ofstream(child) << again.text;
  EXPECT_EQ(load_recipe(child.string()).train.seed, 4u);
  // A single string and a block mapping are pinned too.
  fs::path single = write("single.yaml", "extends: team/base.yaml\n");
  PinResult s = pin_recipe_bases(single.string());
  EXPECT_EQ(s.text, "extends: [{path: team/base.yaml, sha256: " + sha256sum_of(base) + "}]\n");
  fs::path block = write("block.yaml", "extends:\n  - path: team/base.yaml\n");
  PinResult b = pin_recipe_bases(block.string());
  EXPECT_EQ(b.text, "extends:\n  - path: team/base.yaml\n    sha256: " + sha256sum_of(base) + "\n");
}

TEST_F(Sharing, TheCatalogListsFindsShadowsAndServesAsBases) {
  write_base("catalog-a/team-base.yaml");
  write("catalog-a/tuned.yaml", "description: tuned for speed\nextends: team-base.yaml\nalgorithm: {name: bytegrad}\n");
  write("catalog-b/tuned.yaml", "description: the other tuned\nextends: team-base.yaml\n");
  write("catalog-b/notes.txt", "not a recipe");
  ScopedEnv env({{"BAGUA_RECIPE_PATH", (dir_ / "catalog-a").string() + ":" + (dir_ / "catalog-b").string()}});
  std::vector<std::string> dirs = recipe_catalog_dirs();
  ASSERT_GE(dirs.size(), 2u);
  EXPECT_EQ(dirs[0], (dir_ / "catalog-a").string());
  EXPECT_EQ(dirs[1], (dir_ / "catalog-b").string());
  auto entries = list_recipe_catalog();
  auto find = [&](const std::string& name, const std::string& dir) -> const CatalogEntry* {
    for (const auto& e : entries)
      if (e.name == name && e.dir == dir) return &e;
    return nullptr;
  };
  const CatalogEntry* tuned = find("tuned", (dir_ / "catalog-a").string());
  ASSERT_NE(tuned, nullptr);
  EXPECT_EQ(tuned->description, "tuned for speed");
  EXPECT_EQ(tuned->algorithm, "bytegrad");
  EXPECT_FALSE(tuned->shadowed);
  const CatalogEntry* hidden = find("tuned", (dir_ / "catalog-b").string());
  ASSERT_NE(hidden, nullptr);
  EXPECT_TRUE(hidden->shadowed);
  EXPECT_EQ(hidden->algorithm, "gradient_allreduce") << "the schema's default";
  const CatalogEntry* base = find("team-base", (dir_ / "catalog-a").string());
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(base->description, "the base");
  EXPECT_EQ(fs::path(base->model).filename(), "tiny.pt");
  EXPECT_EQ(find_catalog_recipe("tuned"), (dir_ / "catalog-a/tuned.yaml").string());
  EXPECT_FALSE(find_catalog_recipe("nothing-of-that-name"));
  // A base named from the catalog, pinned.
  const std::string sha = sha256sum_of(dir_ / "catalog-a/team-base.yaml");
  fs::path mine = write("mine.yaml", "extends: [{recipe: team-base, sha256: " + sha + "}]\ntrain: {epochs: 6}\n");
  Recipe r = load_recipe(mine.string());
  EXPECT_EQ(r.train.epochs, 6);
  EXPECT_EQ(r.optimizers[0].lr, 0.1);
  fs::path missing = write("missing.yaml", "extends: [{recipe: no-such-base}]\n");
  try {
    load_recipe(missing.string());
    FAIL();
  } catch (const RecipeError& e) {
    EXPECT_NE(std::string(e.what()).find("no recipe named \"no-such-base\" in the catalog"), std::string::npos)
        << e.what();
  }
  // A catalog name, a run directory and a file are all recipe arguments.
  EXPECT_EQ(locate_recipe_argument("tuned"), (dir_ / "catalog-a/tuned.yaml").string());
  EXPECT_EQ(locate_recipe_argument(mine.string()), mine.string());
  write("runs/x/recipe.resolved.yaml", "name: x\n");
  EXPECT_EQ(locate_recipe_argument((dir_ / "runs/x").string()), (dir_ / "runs/x/recipe.resolved.yaml").string());
  EXPECT_THROW(locate_recipe_argument((dir_ / "runs").string()), Error);
  EXPECT_THROW(locate_recipe_argument("tunde"), Error);
}

TEST_F(Sharing, AStandaloneCopyResolvesTheSameFilesFromElsewhere) {
  write_base("team/base.yaml");
  fs::path child = write("team/exp.yaml", "name: exp\nextends: base.yaml\ndata: {batch_size: 5}\n");
  fs::create_directories(dir_ / "far/away");
  const fs::path dest = dir_ / "far/away/copy.yaml";
  std::ofstream(dest) << standalone_recipe_text(child.string(), dest.string());
  const std::string text = read_text(dest.string());
  EXPECT_EQ(text.find("\nextends:"), std::string::npos) << text;
  Recipe original = load_recipe(child.string());
  Recipe copy = load_recipe(dest.string());
  EXPECT_EQ(copy.name, "copy") << "the copy is named after its file";
  std::vector<std::string> differing;
  for (const auto& d : diff_resolved(original.resolved, copy.resolved)) differing.push_back(d.path);
  EXPECT_EQ(differing, (std::vector<std::string>{"name", "output.dir"}));
  EXPECT_EQ(copy.model.torchscript, original.model.torchscript);
  EXPECT_EQ(copy.data.batch_size, 5);
  // A copy under another top directory than the fixtures' (the text alone:
  // nothing is written there) names them absolutely, not by "../" up to /.
  const std::string far = standalone_recipe_text(child.string(), "/bagua-no-such-top/x/copy.yaml");
  EXPECT_NE(far.find("torchscript: " + fs::path(source_path("tests/fixtures/recipes/models/tiny.pt")).lexically_normal().string()),
            std::string::npos)
      << far;
  EXPECT_EQ(far.find("../"), std::string::npos) << far;
  // A file beside the recipe (the same top directory as the copy): relative.
  fs::path near = write("team/near.yaml", "name: near\nextends: base.yaml\nmodel: {torchscript: models/mine.pt}\n");
  const std::string near_text = standalone_recipe_text(near.string(), dest.string());
  EXPECT_NE(near_text.find("torchscript: ../../team/models/mine.pt"), std::string::npos) << near_text;
}

TEST(RecipeDiff, EveryKindOfChangeIsOneKey) {
  const json a = json::parse(R"({"s": 1, "l": [1, 2, 3], "m": {"x": 1, "y": {"z": "a"}}, "gone": true,
                                  "o": [{"lr": 0.1, "type": "sgd"}]})");
  const json b = json::parse(R"({"s": 2, "l": [1, 2], "m": {"x": 1, "y": {"z": "b"}}, "new": null,
                                  "o": [{"lr": 0.2, "type": "sgd"}]})");
  std::map<std::string, std::pair<std::string, std::string>> got;
  for (const auto& d : diff_resolved(a, b))
    got[d.path] = {d.a ? d.a->dump() : "absent", d.b ? d.b->dump() : "absent"};
  const std::map<std::string, std::pair<std::string, std::string>> want{
      {"s", {"1", "2"}},           {"l[2]", {"3", "absent"}},  {"m.y.z", {"\"a\"", "\"b\""}},
      {"gone", {"true", "absent"}}, {"new", {"absent", "null"}}, {"o[0].lr", {"0.1", "0.2"}}};
  EXPECT_EQ(got, want);
  EXPECT_TRUE(diff_resolved(a, a).empty());
}

TEST(ProvenanceCompare, ModelRecipeMeaningAndVersionAreToldApart) {
  const json saved = json::parse(R"({"model": {"path": "a.pt", "sha256": "11"}, "bagua": {"version": "0.1.0"},
    "recipe": {"resolved": {"optimizers": [{"lr": 0.1, "fused": false}], "train": {"epochs": 2, "seed": 1},
                            "algorithm": {"name": "bytegrad", "flatten": true}, "output": {"dir": "x"}}}})");
  json now = saved;
  EXPECT_TRUE(compare_provenance(saved, now).model.empty());
  EXPECT_TRUE(compare_provenance(saved, now).recipe.empty());
  EXPECT_TRUE(compare_provenance(json(), now).recipe.empty()) << "a checkpoint older than provenance";
  // What may change on a resume: length, output, and how the same arithmetic runs.
  now["recipe"]["resolved"]["train"]["epochs"] = 5;
  now["recipe"]["resolved"]["output"]["dir"] = "y";
  now["recipe"]["resolved"]["optimizers"][0]["fused"] = true;
  now["recipe"]["resolved"]["algorithm"]["flatten"] = false;
  EXPECT_TRUE(compare_provenance(saved, now).recipe.empty());
  // What may not.
  now["recipe"]["resolved"]["optimizers"][0]["lr"] = 0.2;
  now["recipe"]["resolved"]["train"]["seed"] = 2;
  now["recipe"]["resolved"]["algorithm"]["name"] = "qadam";
  now["model"]["sha256"] = "22";
  now["bagua"]["version"] = "0.2.0";
  ProvenanceCheck c = compare_provenance(saved, now);
  EXPECT_EQ(c.recipe, (std::vector<std::string>{"algorithm.name: \"bytegrad\" in the checkpoint, \"qadam\" now",
                                                "optimizers[0].lr: 0.1 in the checkpoint, 0.2 now",
                                                "train.seed: 1 in the checkpoint, 2 now"}));
  ASSERT_EQ(c.model.size(), 1u);
  EXPECT_NE(c.model[0].find("has SHA-256 22"), std::string::npos) << c.model[0];
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_NE(c.warnings[0].find("bagua 0.1.0"), std::string::npos) << c.warnings[0];
}

TEST_F(Sharing, SchemaVersionNewerIsOneMessageOlderIsANote) {
  write_base();
  fs::path newer = write("newer.yaml", "schema_version: 3\nextends: team/base.yaml\nfuture_key: {a: 1}\n");
  try {
    load_recipe(newer.string());
    FAIL();
  } catch (const RecipeError& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u) << "one message, not a list of unknown keys: " << e.what();
    EXPECT_EQ(e.diagnostics()[0].line, 1);
    EXPECT_NE(e.diagnostics()[0].message.find("written for recipe schema 3"), std::string::npos) << e.what();
    EXPECT_NE(e.diagnostics()[0].message.find("update bagua"), std::string::npos) << e.what();
  }
  fs::path older = write("older.yaml", "schema_version: 1\nextends: team/base.yaml\n");
  Recipe r = load_recipe(older.string());
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].message.find("schema 2 added"), std::string::npos) << r.notes[0].message;
  fs::path current = write("current.yaml", "schema_version: 2\nextends: team/base.yaml\n");
  EXPECT_TRUE(load_recipe(current.string()).notes.empty());
  fs::path two_lines = write("two.yaml", "description: \"a\\nb\"\nextends: team/base.yaml\n");
  EXPECT_THROW(load_recipe(two_lines.string()), RecipeError);
}

// The version a file declares is its own: a base written for a newer schema
// is refused as such even when the recipe extending it says an older one
// (the merged tree would carry only the child's version), and --set cannot
// restate it.
TEST_F(Sharing, ABaseWrittenForANewerSchemaIsRefusedAsSuchUnderAnOlderChild) {
  write_base();
  write("team/fragment.yaml", "schema_version: 3\nextends: base.yaml\nfuture_section: {a: 1}\n");
  fs::path child = write("child.yaml", "schema_version: 2\nextends: team/fragment.yaml\n");
  try {
    load_recipe(child.string());
    FAIL() << "a schema-3 base was accepted under a schema-2 child";
  } catch (const RecipeError& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u) << "one message, not the base's unknown keys: " << e.what();
    EXPECT_NE(e.diagnostics()[0].file.find("fragment.yaml"), std::string::npos) << e.what();
    EXPECT_EQ(e.diagnostics()[0].line, 1);
    EXPECT_NE(e.diagnostics()[0].message.find("written for recipe schema 3"), std::string::npos) << e.what();
  }
  fs::path current = write("current.yaml", "extends: team/base.yaml\n");
  try {
    load_recipe(current.string(), {"schema_version=3"});
    FAIL() << "--set schema_version=3 was accepted";
  } catch (const RecipeError& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u) << e.what();
    EXPECT_NE(e.diagnostics()[0].message.find("schema_version cannot be overridden"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bagua::testing
