// Checkpoints that survive what can happen to them: a tensor record past
// 4 GiB (its CRC-32 summed in pieces), a meta.json of the wrong shape, and a
// run stopped between the renames that save a step again. In this process,
// on one rank, with the real save and resume.
#include "train/checkpoint.h"
#include "train/crc32.h"

#include <bagua/communication.h>
#include <bagua/recipe.h>
#include <bagua/system.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using bagua::train::NamedTensors;
using bagua::train::Position;

TEST(Crc32, PiecesGiveTheCrcOfTheWhole) {
  std::vector<unsigned char> data(3 * 1024 * 1024 + 17);
  std::mt19937 gen(7);
  for (auto& b : data) b = static_cast<unsigned char>(gen());
  const uint32_t whole = static_cast<uint32_t>(
      ::crc32(::crc32(0L, Z_NULL, 0), data.data(), static_cast<uInt>(data.size())));
  for (size_t piece : {size_t{1} << 30, size_t{1} << 20, size_t{4096}, size_t{7}}) {
    EXPECT_EQ(bagua::train::crc32_update(bagua::train::crc32_initial(), data.data(), data.size(), piece), whole)
        << "pieces of " << piece;
  }
  // Fed in two calls, as a writer gets its bytes.
  uint32_t c = bagua::train::crc32_update(bagua::train::crc32_initial(), data.data(), 1000, 64);
  c = bagua::train::crc32_update(c, data.data() + 1000, data.size() - 1000, 64);
  EXPECT_EQ(c, whole);
  EXPECT_EQ(bagua::train::crc32_update(bagua::train::crc32_initial(), data.data(), 0), bagua::train::crc32_initial());
}

class CheckpointIntegrity : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!bagua::is_initialized()) {
      setenv("RANK", "0", 1);
      setenv("WORLD_SIZE", "1", 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(bagua::find_free_port()).c_str(), 1);
      bagua::init_process_group();
    }
    group_ = bagua::default_group()->duplicate("gloo");
    recipe_ = bagua::load_recipe(std::string(BAGUA_SOURCE_DIR) + "/tests/fixtures/recipes/good/minimal.yaml");
    dir_ = fs::temp_directory_path() / ("bagua-ckpt-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    weight_ = torch::zeros({4, 3});
    params_ = {{"layer.weight", weight_}};
    optimizers_ = {std::make_shared<torch::optim::SGD>(std::vector<at::Tensor>{weight_}, torch::optim::SGDOptions(0.1))};
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A checkpoint at `step` whose weights are all `value`.
  void save(int64_t step, float value) {
    weight_.fill_(value);
    bagua::train::SaveCheckpointOptions o;
    o.dir = dir_.string();
    o.meta.position = Position{step, 0, step};
    o.recipe = &recipe_;
    o.parameters = params_;
    o.optimizers = optimizers_;
    o.group = group_;
    o.keep = 10;
    bagua::train::save_checkpoint(o);
  }

  // The step resumed from and the weights loaded (nothing: no checkpoint).
  std::optional<std::pair<int64_t, float>> resume() {
    weight_.fill_(-1);
    auto resumed = bagua::train::resume_checkpoint(dir_.string(), "", params_, {}, optimizers_, group_);
    if (!resumed) return std::nullopt;
    return std::make_pair(resumed->meta.position.step, weight_[0][0].item<float>());
  }

  fs::path step_dir(int64_t step) const {
    char name[32];
    std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
    return dir_ / name;
  }

  bagua::ProcessGroupPtr group_;
  bagua::Recipe recipe_;
  fs::path dir_;
  at::Tensor weight_;
  NamedTensors params_;
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers_;
};

TEST_F(CheckpointIntegrity, SavedAndResumed) {
  save(4, 1.0f);
  save(8, 2.0f);
  EXPECT_EQ(resume(), std::make_pair(int64_t{8}, 2.0f));
}

// JSON of the wrong shape in the newest meta.json: that checkpoint is set
// aside as damaged and the run resumes from the one before.
TEST_F(CheckpointIntegrity, AnOddlyShapedMetaJsonIsADamagedCheckpoint) {
  for (const char* odd : {R"("files": {"model.pt": "12 bytes"})", R"("files": {"model.pt": {"bytes": "12", "crc32": "0"}})",
                          R"("files": {"model.pt": {"bytes": 12}})", R"("files": [1, 2])"}) {
    SCOPED_TRACE(odd);
    fs::remove_all(dir_);
    save(4, 1.0f);
    save(8, 2.0f);
    auto meta = nlohmann::json::parse(std::ifstream(step_dir(8) / "meta.json"));
    const auto bad = nlohmann::json::parse(std::string("{") + odd + "}");
    meta["files"] = bad["files"];
    std::ofstream(step_dir(8) / "meta.json") << meta.dump();
    EXPECT_EQ(resume(), std::make_pair(int64_t{4}, 1.0f));
    EXPECT_TRUE(fs::exists(dir_ / "step-00000008.damaged"));
  }
}

// Saving a step again (a run resumed behind it) replaces it.
TEST_F(CheckpointIntegrity, ASecondSaveOfAStepReplacesIt) {
  save(8, 2.0f);
  save(8, 3.0f);
  EXPECT_EQ(resume(), std::make_pair(int64_t{8}, 3.0f));
  EXPECT_FALSE(fs::exists(dir_ / ".step-00000008.old"));
}

// A run stopped between the renames of a save: a complete .tmp whose step
// has no checkpoint becomes it; the earlier copy moved aside (.old) too.
TEST_F(CheckpointIntegrity, ACompleteCopyLeftByAStoppedSaveIsRecovered) {
  save(4, 1.0f);
  save(8, 2.0f);
  fs::rename(step_dir(8), dir_ / ".step-00000008.tmp");  // stopped before its final rename
  EXPECT_EQ(resume(), std::make_pair(int64_t{8}, 2.0f));
  EXPECT_TRUE(fs::exists(step_dir(8)));
  fs::rename(step_dir(8), dir_ / ".step-00000008.old");  // moved aside, the new copy never came
  EXPECT_EQ(resume(), std::make_pair(int64_t{8}, 2.0f));
  EXPECT_FALSE(fs::exists(dir_ / ".step-00000008.old"));
}

TEST_F(CheckpointIntegrity, APartialCopyIsRemovedAndTheRunResumesFromTheLastCompleteOne) {
  save(4, 1.0f);
  save(8, 2.0f);
  fs::rename(step_dir(8), dir_ / ".step-00000008.tmp");
  fs::remove(dir_ / ".step-00000008.tmp" / "meta.json");  // stopped while writing it
  EXPECT_EQ(resume(), std::make_pair(int64_t{4}, 1.0f));
  EXPECT_FALSE(fs::exists(dir_ / ".step-00000008.tmp"));
  EXPECT_FALSE(fs::exists(step_dir(8)));
}

}  // namespace
