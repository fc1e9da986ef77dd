// torchscript_file_problem() (bagua/model_file.h): what a model file is,
// from its bytes, as `bagua validate` reads it (no LibTorch).
#include <bagua/model_file.h>

#include "recipe_test_util.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace bagua {
namespace {

namespace fs = std::filesystem;
using testing::source_path;

class ModelFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("bagua-model-file-" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  fs::path dir_;
};

TEST_F(ModelFile, TorchScriptArchivesPass) {
  for (const char* model : {"tests/fixtures/recipes/models/tiny.pt", "tests/fixtures/models/mlp_small.pt",
                            "recipes/models/cnn.pt"}) {
    EXPECT_EQ(torchscript_file_problem(source_path(model)), "") << model;
  }
}

TEST_F(ModelFile, EveryOtherFileSaysWhatItIs) {
  const std::string tiny = read(source_path("tests/fixtures/recipes/models/tiny.pt"));
  ASSERT_GT(tiny.size(), 100u);
  EXPECT_NE(torchscript_file_problem(write("text.pt", "hello, model\n")).find("not a zip archive"), std::string::npos);
  EXPECT_NE(torchscript_file_problem(write("old.pt", std::string("\x80\x02}q\x00.", 6))).find("Python pickle"),
            std::string::npos);
  EXPECT_NE(torchscript_file_problem(write("empty.pt", "")).find("too short"), std::string::npos);
  EXPECT_NE(torchscript_file_problem(write("cut.pt", tiny.substr(0, tiny.size() / 2))).find("cut short"),
            std::string::npos);
  EXPECT_NE(torchscript_file_problem((dir_ / "missing.pt").string()).find("cannot be read"), std::string::npos);
  // The same archive with its code/ and constants.pkl entries renamed (the
  // names' lengths kept): what torch.save() writes, a pickle and tensors.
  std::string pickled = tiny;
  for (const std::string from : {"/code/", "constants.pkl"}) {
    const std::string to = from == "/code/" ? "/cade/" : "constantz.pkl";
    for (size_t at = pickled.find(from); at != std::string::npos; at = pickled.find(from, at + 1)) {
      pickled.replace(at, from.size(), to);
    }
  }
  EXPECT_NE(torchscript_file_problem(write("saved.pt", pickled)).find("written by torch.save()"), std::string::npos);
  // Garbage with a zip's first bytes: no central directory to read.
  EXPECT_NE(torchscript_file_problem(write("junk.pt", "PK\x03\x04" + std::string(5000, 'x'))).find("cut short"),
            std::string::npos);
}

}  // namespace
}  // namespace bagua
