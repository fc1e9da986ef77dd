// The bad-data corpus: every broken file is a DataError (a user error)
// naming the file and the line (csv, jsonl) or record / offset (idx,
// tensors). Text files live in tests/fixtures/data/bad/; binary ones are written
// here (IDX) or by Debian's Python (torch.save) into a temporary directory.
#include "data/data_test_support.h"

#include <fstream>

namespace bagua {
namespace {

using testing::data_dir;
using testing::expect_data_error;

std::string bad(const std::string& name) { return data_dir() + "/bad/" + name; }

// ---- csv ----

DataSource csv(const std::string& path, const std::string& target = "label") {
  DataSource s;
  s.format = DataFormat::kCsv;
  s.path = path;
  s.target_column.name = target;
  return s;
}

void expect_csv_error(const std::string& file, std::initializer_list<std::string> fragments,
                      const std::string& target = "label") {
  SCOPED_TRACE(file);
  expect_data_error([&] { load_dataset(csv(bad(file), target), TargetKind::kClassIndex); }, fragments);
}

TEST(BadCsv, RaggedRow) {
  expect_csv_error("ragged.csv", {"ragged.csv:4: ", "expected 4 fields", "found 3"});
}
TEST(BadCsv, NonNumericField) {
  expect_csv_error("non_numeric.csv", {"non_numeric.csv:3: ", "'f1'", "'abc' is not a number"});
}
TEST(BadCsv, EmptyField) {
  expect_csv_error("empty_field.csv", {"empty_field.csv:2: ", "'f1' (index 1) is empty"});
}
TEST(BadCsv, EmptyFile) { expect_csv_error("empty.csv", {"empty.csv:1: ", "empty file"}); }
TEST(BadCsv, HeaderOnly) { expect_csv_error("header_only.csv", {"header_only.csv:2: ", "no data rows"}); }
TEST(BadCsv, ClassIndexNotAnInteger) {
  expect_csv_error("bad_class.csv", {"bad_class.csv:3: ", "'1.5' is not a class index"});
}
TEST(BadCsv, UnknownColumnName) {
  expect_data_error(
      [] { load_dataset(csv(data_dir() + "/good/points.csv", "lable"), TargetKind::kClassIndex); },
      {"points.csv:1: ", "target_column 'lable' is not a column", "a, b, c, label"});
  DataSource s = csv(data_dir() + "/good/points.csv");
  s.input_columns.push_back(ColumnRef{"", 9});
  expect_data_error([&] { load_dataset(s, TargetKind::kClassIndex); },
                    {"points.csv:1: ", "input_columns index 9 is out of range", "4 columns"});
}
TEST(BadCsv, NameWithoutHeaderAndWrongShape) {
  DataSource s = csv(data_dir() + "/good/plain.csv");
  s.header = false;
  s.delimiter = ';';
  expect_data_error([&] { load_dataset(s, TargetKind::kClassIndex); },
                    {"plain.csv:1: ", "header is false"});
  s.target_column = ColumnRef{"", 2};
  s.input_shape = {3};
  expect_data_error([&] { load_dataset(s, TargetKind::kClassIndex); },
                    {"plain.csv", "input_shape [3] has 3 elements, but each sample has 2"});
}
TEST(BadCsv, MissingFile) {
  expect_data_error([] { load_dataset(csv(bad("no-such-file.csv")), TargetKind::kClassIndex); },
                    {"no-such-file.csv", "cannot open"});
}

// ---- jsonl ----

void expect_jsonl_error(const std::string& file, std::initializer_list<std::string> fragments,
                        TargetKind kind = TargetKind::kClassIndex) {
  SCOPED_TRACE(file);
  DataSource s;
  s.format = DataFormat::kJsonl;
  s.path = bad(file);
  expect_data_error([&] { load_dataset(s, kind); }, fragments);
}

TEST(BadJsonl, MalformedJsonAfterABlankLine) {
  expect_jsonl_error("malformed.jsonl", {"malformed.jsonl:3: ", "malformed JSON"});
}
TEST(BadJsonl, MissingField) {
  expect_jsonl_error("missing_field.jsonl", {"missing_field.jsonl:3: ", "missing field 'target'"});
}
TEST(BadJsonl, WrongType) {
  expect_jsonl_error("wrong_type.jsonl",
                     {"wrong_type.jsonl:2: ", "field 'input' must be a list of numbers, found a string"});
  expect_jsonl_error("bad_element.jsonl", {"bad_element.jsonl:1: ", "element 1 is null"});
  expect_jsonl_error("not_object.jsonl", {"not_object.jsonl:2: ", "expected a JSON object, found a list"});
}
TEST(BadJsonl, NegativeClassIndex) {
  expect_jsonl_error("negative_class.jsonl", {"negative_class.jsonl:2: ", "class index", "found -1"});
}
TEST(BadJsonl, NumberListsOfDifferentLengths) {
  expect_jsonl_error("ragged_numbers.jsonl",
                     {"ragged_numbers.jsonl:2: ", "has 3 numbers, but line 1 has 2"}, TargetKind::kFloat);
}
TEST(BadJsonl, NoRecords) { expect_jsonl_error("empty.jsonl", {"empty.jsonl:2: ", "no records: every line is blank"}); }

// ---- idx ----

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}
std::string idx_images(uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols, size_t payload) {
  return be32(magic) + be32(n) + be32(rows) + be32(cols) + std::string(payload, '\x07');
}
std::string idx_labels(uint32_t n, size_t payload) {
  return be32(0x801) + be32(n) + std::string(payload, '\x01');
}

class BadIdx : public ::testing::Test {
 protected:
  DataSource source(const std::string& images, const std::string& labels) {
    DataSource s;
    s.format = DataFormat::kIdx;
    s.images = dir_.file(images);
    s.labels = dir_.file(labels);
    return s;
  }
  void SetUp() override {
    testing::write_file(dir_.file("good-images"), idx_images(0x803, 5, 4, 4, 5 * 16));
    testing::write_file(dir_.file("good-labels"), idx_labels(5, 5));
  }
  testing::TempDir dir_;
};

TEST_F(BadIdx, TheFixtureItselfLoads) {
  auto d = load_dataset(source("good-images", "good-labels"), TargetKind::kClassIndex);
  EXPECT_EQ(d->size(), 5);
  EXPECT_EQ(d->num_classes(), 2);
  EXPECT_FLOAT_EQ(d->get_batch({4}).input.sum().item<float>(), 16 * 7 / 255.0f);
}
TEST_F(BadIdx, WrongMagic) {
  // A label file given as the images.
  expect_data_error([&] { load_dataset(source("good-labels", "good-labels"), TargetKind::kClassIndex); },
                    {"good-labels: not an IDX image file", "expected magic 0x00000803",
                     "found 0x00000801 (an IDX label file)", "byte offset 0"});
  testing::write_file(dir_.file("text-labels"), "hello world, not IDX");
  expect_data_error([&] { load_dataset(source("good-images", "text-labels"), TargetKind::kClassIndex); },
                    {"text-labels: not an IDX label file", "expected magic 0x00000801"});
}
TEST_F(BadIdx, TruncatedRecords) {
  // 5 images of 16 bytes declared, 2.5 present: record 2 is cut at byte 16 + 32.
  testing::write_file(dir_.file("short-images"), idx_images(0x803, 5, 4, 4, 40));
  expect_data_error([&] { load_dataset(source("short-images", "good-labels"), TargetKind::kClassIndex); },
                    {"short-images: truncated", "5 images", "inside record 2", "byte offset 48"});
  testing::write_file(dir_.file("short-header"), be32(0x803) + be32(5));
  expect_data_error([&] { load_dataset(source("short-header", "good-labels"), TargetKind::kClassIndex); },
                    {"short-header: truncated IDX header", "expected 16 bytes, found 8"});
  testing::write_file(dir_.file("long-labels"), idx_labels(5, 7));
  expect_data_error([&] { load_dataset(source("good-images", "long-labels"), TargetKind::kClassIndex); },
                    {"long-labels: 2 unexpected bytes", "byte offset 13"});
}
TEST_F(BadIdx, CountMismatch) {
  testing::write_file(dir_.file("four-labels"), idx_labels(4, 4));
  expect_data_error([&] { load_dataset(source("good-images", "four-labels"), TargetKind::kClassIndex); },
                    {"good-images holds 5 images", "four-labels holds 4 labels"});
}
TEST_F(BadIdx, TruncatedGzipOfTheRealFile) {
  std::ifstream in("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz", std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(gz.size(), 1000u);
  testing::write_file(dir_.file("cut-labels.gz"), gz.substr(0, gz.size() / 2));
  expect_data_error([&] { load_dataset(source("good-images", "cut-labels.gz"), TargetKind::kClassIndex); },
                    {"cut-labels.gz: truncated gzip stream",
                     "ends at byte " + std::to_string(gz.size() / 2)});
}
// A cut gzip file ends in whatever bytes were there, read as the trailer's
// size: here 4 GiB, which the loader must not allocate on trust (under
// scripts/asan-test.sh an allocation over 1 GiB fails the test).
TEST_F(BadIdx, TruncatedGzipEndingInAHugeSize) {
  std::ifstream in("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz", std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(gz.size(), 1000u);
  std::string cut = gz.substr(0, gz.size() / 2);
  cut.replace(cut.size() - 4, 4, "\xff\xff\xff\xff");
  testing::write_file(dir_.file("huge-trailer.gz"), cut);
  expect_data_error([&] { load_dataset(source("good-images", "huge-trailer.gz"), TargetKind::kClassIndex); },
                    {"huge-trailer.gz: ", "gzip"});
}
TEST_F(BadIdx, InputShapeOfTheWrongSize) {
  DataSource s = source("good-images", "good-labels");
  s.input_shape = {1, 3, 3};
  expect_data_error([&] { load_dataset(s, TargetKind::kClassIndex); },
                    {"good-images: input_shape [1, 3, 3] has 9 elements, but each sample has 16"});
}
TEST_F(BadIdx, MissingFile) {
  expect_data_error([&] { load_dataset(source("good-images", "absent"), TargetKind::kClassIndex); },
                    {"absent: cannot open"});
}

// ---- tensors ----

class BadTensors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir;
    testing::run_python(
        "import torch\n"
        "d = '" + dir_->path() + "/'\n"
        "x = torch.zeros(4, 2)\n"
        "torch.save(x, d + 'not_dict.pt')\n"
        "torch.save({'features': x, 'target': torch.zeros(4, dtype=torch.long)}, d + 'missing_key.pt')\n"
        "torch.save({'input': x, 'target': torch.zeros(3, dtype=torch.long)}, d + 'mismatch.pt')\n"
        "torch.save({'input': x, 'target': torch.tensor([0, 2, -1, 1])}, d + 'negative.pt')\n"
        "torch.save({'input': x, 'target': torch.zeros(4)}, d + 'float_classes.pt')\n"
        "torch.save({'input': x, 'target': [0, 1, 2, 3]}, d + 'list_target.pt')\n"
        "torch.save({'input': x, 'target': torch.zeros(4, dtype=torch.long)}, d + 'legacy.pt',\n"
        "           _use_new_zipfile_serialization=False)\n"
        "open(d + 'garbage.pt', 'w').write('definitely not a zip file')\n");
  }
  static void TearDownTestSuite() { delete dir_; }
  static void expect_error(const std::string& file, std::initializer_list<std::string> fragments) {
    SCOPED_TRACE(file);
    DataSource s;
    s.format = DataFormat::kTensors;
    s.path = dir_->file(file);
    expect_data_error([&] { load_dataset(s, TargetKind::kClassIndex); }, fragments);
  }
  static testing::TempDir* dir_;
};
testing::TempDir* BadTensors::dir_ = nullptr;

TEST_F(BadTensors, NotADict) { expect_error("not_dict.pt", {"not_dict.pt: expected a dict", "found a tensor"}); }
TEST_F(BadTensors, MissingKey) {
  expect_error("missing_key.pt", {"missing_key.pt: no key 'input'", "'features', 'target'"});
}
TEST_F(BadTensors, FirstDimensionsDiffer) {
  expect_error("mismatch.pt", {"mismatch.pt: 'input' has 4 records (shape [4, 2])",
                               "'target' has 3 (shape [3])"});
}
TEST_F(BadTensors, NegativeClassRecord) {
  expect_error("negative.pt", {"negative.pt: 'target' record 2 is -1"});
}
TEST_F(BadTensors, WrongTargetTypes) {
  expect_error("float_classes.pt", {"float_classes.pt: 'target' has dtype Float", "class indices"});
  expect_error("list_target.pt", {"list_target.pt: 'target' is a list, expected a tensor"});
}
TEST_F(BadTensors, NotATorchSaveZipFile) {
  expect_error("garbage.pt", {"garbage.pt: not a file written by torch.save"});
  expect_error("legacy.pt", {"legacy.pt: a legacy torch.save file", "byte offset 0"});
}

}  // namespace
}  // namespace bagua
