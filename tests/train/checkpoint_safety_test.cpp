// Checkpoints that must not lose anything: a torn newest checkpoint, a
// full disk, pruning after resuming behind newer checkpoints. The real
// binary, real files, a real (small) tmpfs for the full disk.
#include "support/bagua_run.h"

#include <gtest/gtest.h>

#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace bagua::testing {
namespace {

std::string step_dir(int step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%08d", step);
  return buf;
}

void flip_a_byte(const fs::path& file) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << file;
  f.seekg(0, std::ios::end);
  const auto size = static_cast<std::streamoff>(f.tellg());
  const std::streamoff at = size / 2;
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(at);
  f.write(&c, 1);
  ASSERT_TRUE(f) << file;
}

TEST_F(RunTest, ADamagedNewestCheckpointIsSetAsideAndTheRunResumesFromTheOneBefore) {
  std::string recipe = write_recipe("torn");
  RunOutcome clean = bagua_run(recipe + " --set output.dir=" + (dir_ / "clean").string());
  ASSERT_EQ(clean.exit_code, 0) << clean.output;

  // Two checkpoints, then the newer one's model.pt is corrupted on disk, and
  // a partial checkpoint is left over as a killed run would leave it.
  RunOutcome first = bagua_run(recipe + " --set train.max_steps=16");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const fs::path ckpts = dir_ / "torn" / "checkpoints";
  auto meta = nlohmann::json::parse(read_file(ckpts / step_dir(16) / "meta.json"));
  ASSERT_TRUE(meta.contains("files")) << meta.dump();
  for (const char* f : {"model.pt", "optimizer-0.pt", "rank-0.pt", "rank-1.pt", "recipe.resolved.yaml"}) {
    ASSERT_TRUE(meta["files"].contains(f)) << f << " " << meta.dump();
    EXPECT_EQ(meta["files"][f]["bytes"].get<uint64_t>(), fs::file_size(ckpts / step_dir(16) / f)) << f;
  }
  flip_a_byte(ckpts / step_dir(16) / "model.pt");
  fs::create_directories(ckpts / ".step-00000099.tmp");
  std::ofstream(ckpts / ".step-00000099.tmp" / "rank-0.pt") << "half";

  // Named explicitly, it is refused.
  RunOutcome named = bagua_run(recipe + " --set checkpoint.resume=" + (ckpts / step_dir(16)).string());
  EXPECT_EQ(named.exit_code, 2) << named.output;
  EXPECT_TRUE(contains(named.output, "cannot be resumed: model.pt's CRC-32 is")) << named.output;
  EXPECT_TRUE(contains(named.output, "did not finish writing")) << named.output;
  EXPECT_FALSE(fs::exists(ckpts / ".step-00000099.tmp"));

  // Automatic: the newest intact one.
  RunOutcome resumed = bagua_run(recipe);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "WARNING: checkpoint " + (ckpts / step_dir(16)).string() + " is damaged"))
      << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "resumed from " + (ckpts / step_dir(8)).string() + " at step 8"))
      << resumed.output;
  EXPECT_TRUE(fs::exists(ckpts / (step_dir(16) + ".damaged") / "model.pt")) << "kept for inspection";
  EXPECT_EQ(max_abs_diff(model_parameters(dir_ / "torn" / "model.pt"), model_parameters(dir_ / "clean" / "model.pt")),
            0.0)
      << "replayed from step 8, the run ends where the uninterrupted one did";
}

TEST_F(RunTest, PruningNeverDeletesACheckpointNewerThanTheOneResumedFrom) {
  std::string recipe = write_recipe("prune");
  RunOutcome first = bagua_run(recipe + " --set train.max_steps=16");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const fs::path ckpts = dir_ / "prune" / "checkpoints";
  ASSERT_TRUE(fs::exists(ckpts / step_dir(8)));
  ASSERT_TRUE(fs::exists(ckpts / step_dir(16)));
  RunOutcome behind = bagua_run(recipe + " --set checkpoint.resume=" + (ckpts / step_dir(8)).string() +
                                " --set train.max_steps=12 --set checkpoint.every_steps=4 --set checkpoint.keep=1");
  ASSERT_EQ(behind.exit_code, 0) << behind.output;
  EXPECT_TRUE(fs::exists(ckpts / step_dir(12) / "meta.json")) << "the checkpoint just written stays";
  EXPECT_TRUE(fs::exists(ckpts / step_dir(16) / "meta.json")) << "a newer checkpoint is never pruned";
  EXPECT_FALSE(fs::exists(ckpts / step_dir(8))) << "older ones beyond keep are";
}

// A tmpfs mounted for the test's lifetime (needs root, as CI has).
class SmallDisk {
 public:
  explicit SmallDisk(const fs::path& at, const std::string& size) : at_(at) {
    fs::create_directories(at);
    const std::string options = "size=" + size;
    mounted_ = ::mount("tmpfs", at.c_str(), "tmpfs", 0, options.c_str()) == 0;
  }
  ~SmallDisk() {
    if (mounted_) ::umount2(at_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  uint64_t free_bytes() const {
    struct statvfs s {};
    ::statvfs(at_.c_str(), &s);
    return static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
  }

 private:
  fs::path at_;
  bool mounted_ = false;
};

TEST_F(RunTest, AFullDiskFailsTheSaveClearlyKeepsThePreviousCheckpointAndTheResumeWorks) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root (CI runs as root)";
  std::string recipe = write_recipe("full");
  RunOutcome clean = bagua_run(recipe + " --set train.max_steps=16 --set output.dir=" + (dir_ / "clean").string());
  ASSERT_EQ(clean.exit_code, 0) << clean.output;

  const fs::path ckpts = dir_ / "full" / "checkpoints";
  SmallDisk disk(ckpts, "2m");
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  RunOutcome first = bagua_run(recipe + " --set train.max_steps=8");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_TRUE(fs::exists(ckpts / step_dir(8) / "meta.json"));
  uint64_t checkpoint_bytes = 0;
  for (const auto& e : fs::directory_iterator(ckpts / step_dir(8))) checkpoint_bytes += fs::file_size(e.path());

  // Fill the disk, leaving room for a third of a checkpoint.
  const uint64_t leave = checkpoint_bytes / 3;
  ASSERT_GT(disk.free_bytes(), leave);
  {
    std::ofstream filler(ckpts / "filler", std::ios::binary);
    std::string block(4096, 'x');
    for (uint64_t n = disk.free_bytes() - leave; n > 0;) {
      const uint64_t part = std::min<uint64_t>(n, block.size());
      filler.write(block.data(), static_cast<std::streamsize>(part));
      n -= part;
    }
  }
  RunOutcome full = bagua_run(recipe + " --set train.max_steps=16");
  EXPECT_EQ(full.exit_code, 3) << full.output;
  EXPECT_TRUE(contains(full.output, "could not write checkpoint " + (ckpts / step_dir(16)).string())) << full.output;
  EXPECT_TRUE(contains(full.output, "No space left on device")) << full.output;
  EXPECT_FALSE(contains(full.output, "terminate called")) << full.output;
  EXPECT_TRUE(contains(full.output, "The earlier checkpoints are kept (newest: " + (ckpts / step_dir(8)).string()))
      << full.output;
  EXPECT_FALSE(fs::exists(ckpts / ".step-00000016.tmp")) << "the partial checkpoint's space is given back";
  EXPECT_FALSE(fs::exists(ckpts / step_dir(16)));

  fs::remove(ckpts / "filler");
  RunOutcome resumed = bagua_run(recipe + " --set train.max_steps=16");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "at step 8")) << resumed.output;
  EXPECT_EQ(max_abs_diff(model_parameters(dir_ / "full" / "model.pt"), model_parameters(dir_ / "clean" / "model.pt")),
            0.0);
}

}  // namespace
}  // namespace bagua::testing
