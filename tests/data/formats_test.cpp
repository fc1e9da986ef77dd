// Good csv, jsonl and tensors files: exact batch contents, padding, dtypes
// per TargetKind, input_shape.
#include "data/data_test_support.h"

#include <nlohmann/json.hpp>

namespace bagua {
namespace {

using testing::data_dir;

at::Tensor floats(std::vector<float> v, std::vector<int64_t> shape) {
  return at::tensor(at::ArrayRef<float>(v), at::kFloat).view(shape);
}
at::Tensor longs(std::vector<int64_t> v, std::vector<int64_t> shape) {
  return at::tensor(at::ArrayRef<int64_t>(v), at::kLong).view(shape);
}

void expect_tensor(const at::Tensor& got, const at::Tensor& want) {
  EXPECT_EQ(got.scalar_type(), want.scalar_type());
  EXPECT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(got.sizes() == want.sizes() && at::equal(got, want)) << "got\n" << got << "\nwant\n" << want;
}

ColumnRef named(const std::string& n) { ColumnRef c; c.name = n; return c; }
ColumnRef index(int64_t i) { ColumnRef c; c.index = i; return c; }

DataSource good_csv(const std::string& file) {
  DataSource s;
  s.format = DataFormat::kCsv;
  s.path = data_dir() + "/good/" + file;
  return s;
}

TEST(CsvDataset, HeaderQuotedNamesCrlfBlankLines) {
  DataSource s = good_csv("points.csv");
  s.target_column = named("label");
  auto d = load_dataset(s, TargetKind::kClassIndex);
  EXPECT_EQ(d->size(), 3);
  EXPECT_EQ(d->num_classes(), 3);
  EXPECT_EQ(d->describe(), "csv points.csv: 3 samples, input [3] float32 from columns 0-2 ('a'..'c'), target int64 (3 classes)");
  Batch b = d->get_batch({2, 0, 1});
  expect_tensor(b.input, floats({-7, 8, 9, 0.5, 1, -2, 1.25, 3, 0.4f}, {3, 3}));
  expect_tensor(b.target, longs({1, 2, 0}, {3}));
}

TEST(CsvDataset, ChosenInputColumnsFloatTargetAndShape) {
  DataSource s = good_csv("points.csv");
  s.target_column = index(2);
  s.input_columns = {named("label"), index(0)};
  s.input_shape = {2, 1};
  auto d = load_dataset(s, TargetKind::kFloat);
  EXPECT_EQ(d->num_classes(), 0);
  Batch b = d->get_batch({0, 1});
  expect_tensor(b.input, floats({2, 0.5, 0, 1.25}, {2, 2, 1}));
  expect_tensor(b.target, floats({-2, 0.4f}, {2}));
}

TEST(CsvDataset, NoHeaderOtherDelimiter) {
  DataSource s = good_csv("plain.csv");
  s.header = false;
  s.delimiter = ';';
  s.target_column = index(0);
  auto d = load_dataset(s, TargetKind::kClassIndex);
  Batch b = d->get_batch({1, 0});
  expect_tensor(b.input, floats({5, 6, 2, 3}, {2, 2}));
  expect_tensor(b.target, longs({4, 1}, {2}));
  EXPECT_EQ(d->num_classes(), 5);
}

DataSource jsonl(const std::string& file) {
  DataSource s;
  s.format = DataFormat::kJsonl;
  s.path = data_dir() + "/good/" + file;
  return s;
}

TEST(JsonlDataset, TokenSequencesPaddedPerBatch) {
  DataSource s = jsonl("tokens.jsonl");
  s.input_field = "ids";
  s.target_field = "y";
  s.pad_value = -1;
  auto d = load_dataset(s, TargetKind::kClassIndex);
  EXPECT_EQ(d->size(), 3);
  EXPECT_EQ(d->num_classes(), 4);
  EXPECT_EQ(d->describe(),
            "jsonl tokens.jsonl: 3 samples, input int64 sequences (length 1..5, padded with -1), "
            "target int64 (4 classes)");
  Batch b = d->get_batch({0, 1});
  expect_tensor(b.input, longs({5, 6, 7, 8, -1, -1}, {2, 3}));
  expect_tensor(b.target, longs({1, 0}, {2}));
  Batch c = d->get_batch({1, 2});
  expect_tensor(c.input, longs({8, -1, -1, -1, -1, 9, 10, 11, 12, 13}, {2, 5}));
  expect_tensor(d->get_batch({1}).input, longs({8}, {1, 1}));
}

TEST(JsonlDataset, MaxLengthTruncatesAndPads) {
  DataSource s = jsonl("tokens.jsonl");
  s.input_field = "ids";
  s.target_field = "y";
  s.max_length = 4;
  auto d = load_dataset(s, TargetKind::kFloat);
  Batch b = d->get_batch({2, 1});
  expect_tensor(b.input, longs({9, 10, 11, 12, 8, 0, 0, 0}, {2, 4}));
  expect_tensor(b.target, floats({3, 0}, {2}));
  EXPECT_EQ(d->num_classes(), 0);
  expect_tensor(d->get_batch({1}).input, longs({8, 0, 0, 0}, {1, 4}));
}

TEST(JsonlDataset, NumberListsAndListTargets) {
  auto d = load_dataset(jsonl("vectors.jsonl"), TargetKind::kFloat);
  EXPECT_EQ(d->describe(), "jsonl vectors.jsonl: 2 samples, input [3] float32, target [2] float32");
  Batch b = d->get_batch({1, 0});
  expect_tensor(b.input, floats({3, 4.25, 5, 0.5, 1, 2}, {2, 3}));
  expect_tensor(b.target, floats({0.5, 0.5, 1, 0}, {2, 2}));
}

// torch.save files written by Debian's Python at test time.
class TensorsDataset : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir;
    reference_ = new nlohmann::json(nlohmann::json::parse(testing::run_python(
        "import torch, json\n"
        "d = '" + dir_->path() + "/'\n"
        "torch.save({'input': torch.arange(24, dtype=torch.float64).reshape(4, 2, 3) / 4,\n"
        "            'target': torch.tensor([3, 0, 2, 1]), 'note': 'extra keys are ignored'}, d + 'cls.pt')\n"
        "torch.save({'x': torch.arange(8, dtype=torch.int32).reshape(4, 2),\n"
        "            'y': torch.tensor([[0.5, 1.5], [2, 3], [4, 5], [6, 7]])}, d + 'reg.pt')\n"
        "t = torch.load('" + data_dir() + "/../recipes/data/tiny-tensors.pt')\n"
        "print(json.dumps({'input': t['input'].tolist(), 'target': t['target'].tolist()}))\n")));
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete reference_;
  }
  static DataSource source(const std::string& path) {
    DataSource s;
    s.format = DataFormat::kTensors;
    s.path = path;
    return s;
  }
  static testing::TempDir* dir_;
  static nlohmann::json* reference_;
};
testing::TempDir* TensorsDataset::dir_ = nullptr;
nlohmann::json* TensorsDataset::reference_ = nullptr;

TEST_F(TensorsDataset, ClassTargets) {
  auto d = load_dataset(source(dir_->file("cls.pt")), TargetKind::kClassIndex);
  EXPECT_EQ(d->size(), 4);
  EXPECT_EQ(d->num_classes(), 4);
  EXPECT_EQ(d->describe(), "tensors cls.pt: 4 samples, input [2, 3] float32, target int64 (4 classes)");
  Batch b = d->get_batch({3, 1});
  std::vector<float> want;
  for (int i : {18, 19, 20, 21, 22, 23, 6, 7, 8, 9, 10, 11}) want.push_back(i / 4.0f);
  expect_tensor(b.input, floats(want, {2, 2, 3}));
  expect_tensor(b.target, longs({1, 0}, {2}));
}

TEST_F(TensorsDataset, OtherKeysFloatTargetsAndShape) {
  DataSource s = source(dir_->file("reg.pt"));
  s.input_key = "x";
  s.target_key = "y";
  s.input_shape = {1, 2};
  auto d = load_dataset(s, TargetKind::kFloat);
  Batch b = d->get_batch({0, 2});
  expect_tensor(b.input, floats({0, 1, 4, 5}, {2, 1, 2}));
  expect_tensor(b.target, floats({0.5, 1.5, 4, 5}, {2, 2}));
}

TEST_F(TensorsDataset, CommittedTinyFile) {
  auto d = load_dataset(source(data_dir() + "/../recipes/data/tiny-tensors.pt"), TargetKind::kClassIndex);
  const auto& ref = *reference_;
  ASSERT_EQ(d->size(), static_cast<int64_t>(ref["target"].size()));
  std::vector<int64_t> all;
  for (int64_t i = 0; i < d->size(); ++i) all.push_back(i);
  Batch b = d->get_batch(all);
  std::vector<float> input;
  for (const auto& row : ref["input"])
    for (const auto& v : row) input.push_back(v.get<float>());
  expect_tensor(b.input, floats(input, {d->size(), static_cast<int64_t>(ref["input"][0].size())}));
  expect_tensor(b.target, longs(ref["target"].get<std::vector<int64_t>>(), {d->size()}));
}

TEST(TargetKind, FollowsTheLoss) {
  EXPECT_EQ(target_kind_for(Loss::kCrossEntropy), TargetKind::kClassIndex);
  EXPECT_EQ(target_kind_for(Loss::kNll), TargetKind::kClassIndex);
  EXPECT_EQ(target_kind_for(Loss::kMse), TargetKind::kFloat);
  EXPECT_EQ(target_kind_for(Loss::kL1), TargetKind::kFloat);
  EXPECT_EQ(target_kind_for(Loss::kBceWithLogits), TargetKind::kFloat);
}

}  // namespace
}  // namespace bagua
