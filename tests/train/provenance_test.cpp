// provenance.json end to end: what a real run records (hashes equal to
// sha256sum's), the resume's refusal of a changed model or recipe and its
// overrides, `bagua run RUN_DIR`, and `bagua diff` of two run directories.
#include "support/bagua_run.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace bagua::testing {
namespace {

std::string sha256sum(const fs::path& p) {
  FILE* pipe = popen(("sha256sum '" + p.string() + "'").c_str(), "r");
  char buf[256] = {0};
  std::string out;
  while (fgets(buf, sizeof(buf), pipe)) out += buf;
  pclose(pipe);
  return out.substr(0, 64);
}

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(read_file(p)); }

TEST_F(RunTest, ProvenanceIsRecordedAndAResumeRefusesAChangedModelOrRecipe) {
  const std::string recipe = write_recipe("prov");
  const fs::path out = dir_ / "prov";
  const std::string env = "BAGUA_HASH_CACHE=" + (dir_ / "hashes.json").string() + " PROV_LR=0.04";
  RunOutcome first = bagua_run(recipe + " --set train.max_steps=8 --set 'optimizers[0].lr=${PROV_LR:-0.05}'", env);
  ASSERT_EQ(first.exit_code, 0) << first.output;

  const nlohmann::json p = read_json(out / "provenance.json");
  EXPECT_EQ(p["format"], 1);
  EXPECT_EQ(p["model"]["sha256"], sha256sum(kSource + "/tests/fixtures/models/mlp_small.pt"));
  EXPECT_EQ(p["model"]["size"], fs::file_size(kSource + "/tests/fixtures/models/mlp_small.pt"));
  ASSERT_EQ(p["data"].size(), 2u) << p["data"].dump();
  for (const auto& d : p["data"]) EXPECT_EQ(d["sha256"], sha256sum(d["path"].get<std::string>())) << d.dump();
  ASSERT_EQ(p["recipe"]["files"].size(), 1u);
  EXPECT_EQ(p["recipe"]["files"][0]["sha256"], sha256sum(recipe));
  EXPECT_EQ(p["recipe"]["overrides"][1], "optimizers[0].lr=${PROV_LR:-0.05}");
  EXPECT_EQ(p["recipe"]["env_names"], nlohmann::json::array({"PROV_LR"}));
  EXPECT_EQ(p.dump().find("0.04\""), std::string::npos) << "a variable's value is never recorded as text";
  EXPECT_EQ(p["recipe"]["resolved"]["optimizers"][0]["lr"], 0.04);
  EXPECT_EQ(p["recipe"]["sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(p["world"]["workers"], 2);
  EXPECT_EQ(p["world"]["hosts"].size(), 1u);
  EXPECT_FALSE(p["libraries"]["libtorch"].get<std::string>().empty());
  EXPECT_FALSE(p["bagua"]["version"].get<std::string>().empty());
  EXPECT_FALSE(p["bagua"]["revision"].get<std::string>().empty());
  // The checkpoint keeps the same record; the hash cache holds the data files.
  const nlohmann::json meta = read_json(out / "checkpoints/step-00000008/meta.json");
  EXPECT_EQ(meta["provenance"]["recipe"]["sha256"], p["recipe"]["sha256"]);
  EXPECT_EQ(meta["provenance"]["model"], p["model"]);
  EXPECT_TRUE(contains(read_file(dir_ / "hashes.json"), "train-images-idx3-ubyte.gz"));

  // Another model file (same layers, other bytes): refused, then allowed.
  const fs::path other = dir_ / "other.pt";
  fs::copy_file(kSource + "/tests/fixtures/models/mlp_small.pt", other);
  std::ofstream(other, std::ios::app | std::ios::binary) << std::string(16, '\0');
  const std::string more = " --set train.max_steps=16 --set 'optimizers[0].lr=${PROV_LR:-0.05}' --set model.torchscript=" +
                           other.string();
  RunOutcome refused = bagua_run(recipe + more, env);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_TRUE(contains(refused.output, "the model differs from the one the checkpoint's run used")) << refused.output;
  EXPECT_TRUE(contains(refused.output, sha256sum(other))) << refused.output;
  EXPECT_TRUE(contains(refused.output, "checkpoint.allow_model_change")) << refused.output;
  RunOutcome allowed = bagua_run(recipe + more + " --set checkpoint.allow_model_change=true", env);
  ASSERT_EQ(allowed.exit_code, 0) << allowed.output;
  EXPECT_TRUE(contains(allowed.output, "WARNING: resuming")) << allowed.output;
  EXPECT_TRUE(contains(allowed.output, "resumed from")) << allowed.output;
  EXPECT_EQ(read_json(out / "provenance.json")["model"]["sha256"], sha256sum(other));

  // A recipe whose meaning changed (momentum): refused, naming the key.
  RunOutcome changed = bagua_run(recipe + more + " --set train.max_steps=24 --set 'optimizers[0].momentum=0.5'", env);
  EXPECT_EQ(changed.exit_code, 2) << changed.output;
  EXPECT_TRUE(contains(changed.output, "optimizers[0].momentum: 0.9 in the checkpoint, 0.5 now")) << changed.output;
  EXPECT_TRUE(contains(changed.output, "checkpoint.allow_recipe_change")) << changed.output;

  // The run directory itself: resumes exactly what it recorded.
  RunOutcome again = bagua_run(out.string() + " --set train.max_steps=24", env);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(contains(again.output, "resumed from")) << again.output;
  EXPECT_TRUE(fs::exists(out / "checkpoints/step-00000024"));
  const nlohmann::json rerun = read_json(out / "provenance.json");
  EXPECT_EQ(rerun["recipe"]["rerun_from"], out.string());
  EXPECT_EQ(rerun["recipe"]["files"][0]["path"], recipe) << "the recipe files that made the run are kept";
  EXPECT_EQ(rerun["recipe"]["resolved"]["optimizers"][0]["lr"], 0.04);

  // Two run directories compared.
  const fs::path second = dir_ / "second";
  RunOutcome b = bagua_run(recipe + " --set train.max_steps=4 --set 'optimizers[0].lr=0.1' --set output.dir=" +
                           second.string(), env);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  RunOutcome diff = bagua_command("diff", out.string() + " " + second.string() + " --ignore output", env);
  EXPECT_EQ(diff.exit_code, 1) << diff.output;
  EXPECT_TRUE(contains(diff.output, "~ optimizers[0].lr: 0.04 -> 0.1\n    A: --set optimizers[0].lr=${PROV_LR:-0.05}\n"
                                    "    B: --set optimizers[0].lr=0.1\n")) << diff.output;
  EXPECT_TRUE(contains(diff.output, "~ model.torchscript:")) << diff.output;
  EXPECT_EQ(bagua_command("diff", out.string() + " " + out.string(), env).exit_code, 0);
}

// Two runs of one recipe whose model file changed between them: the recipes
// are the same, the bytes the runs trained are not, and diff says which.
TEST_F(RunTest, DiffOfTwoRunsNamesTheInputFileWhoseBytesDiffer) {
  const std::string recipe = write_recipe("inputs");
  const fs::path model = dir_ / "model.pt";
  fs::copy_file(kSource + "/tests/fixtures/models/mlp_small.pt", model);
  const std::string env = "BAGUA_HASH_CACHE=" + (dir_ / "hashes.json").string();
  const std::string args = " --nproc-per-node 1 --set train.max_steps=2 --set model.torchscript=" + model.string();
  RunOutcome a = bagua_run(recipe + args + " --set output.dir=" + (dir_ / "a").string(), env);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  std::ofstream(model, std::ios::app | std::ios::binary) << std::string(16, '\0');  // same layers, other bytes
  RunOutcome b = bagua_run(recipe + args + " --set output.dir=" + (dir_ / "b").string(), env);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const std::string sha_a = read_json(dir_ / "a/provenance.json")["model"]["sha256"];
  const std::string sha_b = read_json(dir_ / "b/provenance.json")["model"]["sha256"];
  ASSERT_EQ(sha_b, sha256sum(model));
  ASSERT_NE(sha_a, sha_b);

  const std::string both = (dir_ / "a").string() + " " + (dir_ / "b").string() + " --ignore output";
  RunOutcome diff = bagua_command("diff", both, env);
  EXPECT_EQ(diff.exit_code, 1) << diff.output;
  EXPECT_TRUE(contains(diff.output, "~ model.torchscript: file sha256 " + sha_a + " -> " + sha_b + "\n    A: " +
                                        model.string() + " (as " + (dir_ / "a/provenance.json").string() +
                                        " records it)\n")) << diff.output;
  EXPECT_TRUE(contains(diff.output, "\n1 input file differs between A")) << diff.output;
  EXPECT_FALSE(contains(diff.output, "data.train")) << "the data is the same: " << diff.output;
  RunOutcome json = bagua_command("diff", both + " --json", env);
  EXPECT_EQ(json.exit_code, 1) << json.output;
  const nlohmann::json j = nlohmann::json::parse(json.output);
  EXPECT_FALSE(j["equal"].get<bool>());
  EXPECT_TRUE(j["inputs_compared"].get<bool>());
  EXPECT_TRUE(j["differences"].empty()) << json.output;
  ASSERT_EQ(j["input_differences"].size(), 1u) << json.output;
  EXPECT_EQ(j["input_differences"][0]["key"], "model.torchscript");
  EXPECT_EQ(j["input_differences"][0]["a"]["file_sha256"], sha_a);
  EXPECT_EQ(j["input_differences"][0]["b"]["file_sha256"], sha_b);
  // --ignore covers inputs as it covers keys.
  EXPECT_EQ(bagua_command("diff", both + " --ignore model", env).exit_code, 0);
}

// bagua run RUN_DIR --set k=v records its own --set (so diff names it, not
// the earlier run's), and output.dir stays as written: relative here, and
// the directory's new name when it was moved.
TEST_F(RunTest, ARerunRecordsItsOwnSetAndKeepsOutputDirAsWritten) {
  const std::string recipe = write_recipe("rel");
  const std::string here = "cd " + dir_.string() + " && BAGUA_HASH_CACHE=" + (dir_ / "hashes.json").string();
  for (const char* out : {"runs/a", "runs/b"}) {
    RunOutcome r = bagua_run(recipe + " --nproc-per-node 1 --set train.max_steps=2 --set output.dir=" + out, here);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  RunOutcome again = bagua_run("runs/b --set train.max_steps=3", here);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(contains(read_file(dir_ / "runs/b/recipe.resolved.yaml"), "dir: runs/b\n"))
      << read_file(dir_ / "runs/b/recipe.resolved.yaml");
  const nlohmann::json p = read_json(dir_ / "runs/b/provenance.json");
  EXPECT_EQ(p["recipe"]["resolved"]["output"]["dir"], "runs/b");
  EXPECT_EQ(p["recipe"]["overrides"].back(), "train.max_steps=3") << p["recipe"]["overrides"].dump();
  EXPECT_EQ(p["recipe"]["origins"]["train.max_steps"], "--set train.max_steps=3");
  EXPECT_EQ(p["recipe"]["files"][0]["path"], recipe) << "the recipe files that made the run are kept";

  RunOutcome diff = bagua_command("diff", "runs/a runs/b", here);
  EXPECT_EQ(diff.exit_code, 1) << diff.output;
  EXPECT_TRUE(contains(diff.output, "~ train.max_steps: 2 -> 3\n    A: --set train.max_steps=2\n"
                                    "    B: --set train.max_steps=3\n")) << diff.output;
  EXPECT_TRUE(contains(diff.output, "~ output.dir: \"runs/a\" -> \"runs/b\"\n")) << diff.output;
  EXPECT_TRUE(contains(diff.output, "\n2 keys differ between A")) << diff.output;

  // A moved run directory re-runs where it now is, named as the command wrote it.
  fs::rename(dir_ / "runs/a", dir_ / "moved");
  RunOutcome moved = bagua_run("moved --set train.max_steps=3", here);
  ASSERT_EQ(moved.exit_code, 0) << moved.output;
  EXPECT_EQ(read_json(dir_ / "moved/provenance.json")["recipe"]["resolved"]["output"]["dir"], "moved");
  EXPECT_FALSE(fs::exists(dir_ / "runs/a"));
}

}  // namespace
}  // namespace bagua::testing
