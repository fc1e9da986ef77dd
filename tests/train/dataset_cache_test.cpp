// The cache's identity of a data source (train/dataset_cache.h): an edited
// file is another data set, even at the same size, so a server that outlives
// runs never hands it its earlier version's samples.
#include "train/dataset_cache.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace {

TEST(DatasetCache, AnEditedFileIsAnotherDataSetEvenAtTheSameSize) {
  const auto path = std::filesystem::temp_directory_path() / ("bagua-identity-" + std::to_string(getpid()) + ".csv");
  bagua::DataSource source;
  source.format = bagua::DataFormat::kCsv;
  source.path = path.string();
  std::ofstream(path) << "x,label\n0.5,1\n0.25,0\n";
  const std::string first = bagua::train::source_identity(source);
  EXPECT_EQ(bagua::train::source_identity(source), first) << "the same contents, the same identity";
  std::ofstream(path) << "x,label\n0.5,0\n0.25,1\n";  // relabelled: same size
  const std::string relabelled = bagua::train::source_identity(source);
  EXPECT_NE(relabelled, first);
  EXPECT_NE(relabelled.find(path.string()), std::string::npos) << relabelled;
  std::ofstream(path) << "x,label\n0.5,1\n0.25,0\n";  // back as it was
  EXPECT_EQ(bagua::train::source_identity(source), first);
  std::filesystem::remove(path);
}

}  // namespace
