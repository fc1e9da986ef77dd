// Which CSV columns a source reads (the default leaves out the target and
// the sampler's complexity column; input_columns and exclude_columns take
// names, indices and "FIRST-LAST" ranges), normalize {mean, std} for csv and
// idx, and errors that name the columns used. Real files, written here.
#include "data/data_test_support.h"

namespace bagua {
namespace {

using testing::expect_data_error;
using testing::TempDir;
using testing::write_file;

ColumnRef by_name(const std::string& n) { ColumnRef c; c.name = n; return c; }
ColumnRef by_index(int64_t i) { ColumnRef c; c.index = i; return c; }
ColumnRef by_range(int64_t first, int64_t last) { ColumnRef c; c.index = first; c.last = last; return c; }

void expect_values(const at::Tensor& got, std::vector<float> want, std::vector<int64_t> shape) {
  at::Tensor w = at::tensor(at::ArrayRef<float>(want), at::kFloat).view(shape);
  EXPECT_TRUE(got.sizes() == w.sizes() && at::allclose(got, w)) << "got\n" << got << "\nwant\n" << w;
}

class CsvColumnsTest : public ::testing::Test {
 protected:
  // label, four pixels, and the complexity column a load_balancing sampler reads.
  DataSource with_complexity_column() {
    write_file(dir_.file("lb.csv"), "label,p0,p1,p2,len\n1,0.5,1,2,3\n0,4,5,6,9\n");
    DataSource s;
    s.format = DataFormat::kCsv;
    s.path = dir_.file("lb.csv");
    s.target_column = by_name("label");
    return s;
  }
  // An id column of text, a label, four values and a length.
  DataSource mixed(bool header = true) {
    std::string rows = "x1,1,0,1,2,3,4\nx2,0,10,11,12,13,14\n";
    write_file(dir_.file("mixed.csv"), header ? "id,label,p0,p1,p2,p3,len\n" + rows : rows);
    DataSource s;
    s.format = DataFormat::kCsv;
    s.path = dir_.file("mixed.csv");
    s.header = header;
    s.target_column = header ? by_name("label") : by_index(1);
    return s;
  }

  TempDir dir_;
};

// Issue 42: a complexity column was swallowed into the default inputs
// ("each sample has 785"), in the training set and the eval set alike.
TEST_F(CsvColumnsTest, TheDefaultInputsLeaveOutTheSamplersComplexityColumn) {
  DataSource s = with_complexity_column();
  s.input_shape = {3};
  DataSpec spec;
  spec.sampler.type = SamplerType::kLoadBalancing;
  spec.sampler.complexity_field = "len";
  auto train = load_dataset(s, TargetKind::kClassIndex, load_options_for(spec));
  expect_values(train->get_batch({0, 1}).input, {0.5, 1, 2, 4, 5, 6}, {2, 3});
  EXPECT_EQ(train->complexities(), (std::vector<double>{3, 9}));
  EXPECT_EQ(train->describe(),
            "csv lb.csv: 2 samples, input [3] float32 from columns 1-3 ('p0'..'p2'), target int64 (2 classes)");
  auto eval = load_dataset(s, TargetKind::kClassIndex, eval_load_options_for(spec));
  expect_values(eval->get_batch({1}).input, {4, 5, 6}, {1, 3});
  EXPECT_TRUE(eval->complexities().empty());
  EXPECT_NE(check_dataset(s, TargetKind::kClassIndex, eval_load_options_for(spec)).find("input [3]"),
            std::string::npos);
  // An eval file without the column: nothing to leave out.
  write_file(dir_.file("no-len.csv"), "label,p0,p1,p2\n1,0.5,1,2\n");
  s.path = dir_.file("no-len.csv");
  expect_values(load_dataset(s, TargetKind::kClassIndex, eval_load_options_for(spec))->get_batch({0}).input,
                {0.5, 1, 2}, {1, 3});
}

TEST_F(CsvColumnsTest, RangesNamesAndIndicesInOrderLessTheExcludedOnes) {
  DataSource s = mixed();
  s.input_columns = {by_name("len"), by_range(2, 5)};
  s.exclude_columns = {by_name("p1"), by_index(4)};
  auto d = load_dataset(s, TargetKind::kClassIndex);
  // len, p0, p3: the id column is not read, so its text is no error.
  expect_values(d->get_batch({0, 1}).input, {4, 0, 3, 14, 10, 13}, {2, 3});
  EXPECT_NE(d->describe().find("from columns 6, 2, 5 ('len', 'p0', 'p3')"), std::string::npos) << d->describe();

  // Everything but the id, by exclusion alone; without a header, by index.
  DataSource excluding = mixed(false);
  excluding.exclude_columns = {by_index(0)};
  expect_values(load_dataset(excluding, TargetKind::kClassIndex)->get_batch({1}).input, {10, 11, 12, 13, 14},
                {1, 5});
  DataSource ranged = mixed(false);
  ranged.input_columns = {by_range(3, 4)};
  expect_values(load_dataset(ranged, TargetKind::kClassIndex)->get_batch({0}).input, {1, 2}, {1, 2});
}

TEST_F(CsvColumnsTest, ColumnErrorsNameTheColumnsUsed) {
  DataSource s = with_complexity_column();
  s.input_shape = {1, 3};
  const std::string at = s.path + ":1: ";
  // No sampler: len is an input, and the shape says which columns made 4.
  expect_data_error([&] { load_dataset(s, TargetKind::kClassIndex); },
                    {s.path + ": input_shape [1, 3] has 3 elements, but each sample has 4 (input columns 1-4 "
                              "('p0'..'len'), 4 of the file's 5 columns: every column but the target 'label' "
                              "(index 0); input_columns and exclude_columns choose others)"});
  s.input_shape.clear();
  s.input_columns = {by_range(1, 7)};
  expect_data_error([&] { load_dataset(s, TargetKind::kClassIndex); },
                    {at + "input_columns range 1-7 is out of range: the file has 5 columns (indices 0-4)"});
  s.input_columns = {by_range(1, 3), by_name("p1")};
  expect_data_error([&] { load_dataset(s, TargetKind::kClassIndex); },
                    {at + "input_columns reads column 'p1' (index 2) twice"});
  s.input_columns = {by_range(0, 2)};
  expect_data_error([&] { load_dataset(s, TargetKind::kClassIndex); },
                    {at + "input_columns includes the target column 'label' (index 0)"});
  s.input_columns.clear();
  s.exclude_columns = {by_range(1, 4)};
  expect_data_error([&] { load_dataset(s, TargetKind::kClassIndex); },
                    {at + "no input columns: every column but the target 'label' (index 0), less exclude_columns "
                          "1-4 ('p0'..'len') leaves none of the file's 5 columns"});
  s.exclude_columns.clear();
  // A misspelt name hears the nearest column; a wide header is not written out whole.
  s.target_column = by_name("lable");
  expect_data_error([&] { load_dataset(s, TargetKind::kClassIndex); },
                    {at + "target_column 'lable' is not a column of the header (did you mean 'label'?): "
                          "label, p0, p1, p2, len"});
  std::string wide = "label", row = "1";
  for (int i = 1; i <= 784; ++i) wide += ",pixel" + std::to_string(i), row += ",0";
  write_file(dir_.file("wide.csv"), wide + "\n" + row + "\n");
  s.path = dir_.file("wide.csv");
  s.target_column = by_name("classes");
  try {
    load_dataset(s, TargetKind::kClassIndex);
    ADD_FAILURE() << "a target column the header lacks was read";
  } catch (const DataError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(": label, pixel1, pixel2, "), std::string::npos) << message;
    EXPECT_NE(message.find("pixel11, and 773 more"), std::string::npos) << message;
    EXPECT_EQ(message.find("did you mean"), std::string::npos) << message;
    EXPECT_LT(message.size(), 300u) << message;
  }
  s.path = dir_.file("lb.csv");
  s.target_column = by_name("label");
  write_file(s.path, "label,p0,p1,p2,len\n1,0.5,abc,2,3\n");
  expect_data_error([&] { load_dataset(s, TargetKind::kClassIndex); },
                    {s.path + ":2: input column 'p1' (index 2): 'abc' is not a number"});
}

TEST_F(CsvColumnsTest, NormalizeMakesEachValueXMinusMeanOverStd) {
  DataSource s = with_complexity_column();
  s.input_columns = {by_range(1, 3)};
  s.mean_std = {{1.0}, {2.0}};
  auto d = load_dataset(s, TargetKind::kClassIndex);
  expect_values(d->get_batch({0, 1}).input, {-0.25, 0, 0.5, 1.5, 2, 2.5}, {2, 3});
  EXPECT_NE(d->describe().find("('p0'..'p2'), normalized (x - 1) / 2,"), std::string::npos) << d->describe();
  // One mean and std per input column.
  s.mean_std = {{0.5, 1, 2}, {1, 2, 4}};
  expect_values(load_dataset(s, TargetKind::kClassIndex)->get_batch({1}).input, {3.5, 2, 1}, {1, 3});
  // With input_shape, per entry of its first dimension.
  s.input_columns = {by_range(1, 4)};
  s.input_shape = {2, 2};
  s.mean_std = {{0, 10}, {1, 2}};
  expect_values(load_dataset(s, TargetKind::kClassIndex)->get_batch({0}).input, {0.5, 1, -4, -3.5}, {1, 2, 2});
  s.input_shape.clear();
  expect_data_error([&] { load_dataset(s, TargetKind::kClassIndex); },
                    {s.path + ": normalize mean has 2 values, but a sample's first dimension has 4 (input columns "
                              "1-4 ('p0'..'len')"});
}

// idx: the same normalize code path after the / 255, per channel.
TEST(IdxNormalize, MeanAndStdApplyAfterScalingToZeroOne) {
  DataSource src;
  src.format = DataFormat::kIdx;
  src.images = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
  src.labels = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
  src.input_shape = {1, 28, 28};
  const at::Tensor scaled = load_dataset(src, TargetKind::kClassIndex)->get_batch({3, 5}).input;
  src.mean_std = {{0.286}, {0.353}};
  auto d = load_dataset(src, TargetKind::kClassIndex);
  const at::Tensor standardized = d->get_batch({3, 5}).input;
  EXPECT_TRUE(at::allclose(standardized, (scaled - 0.286) / 0.353, 1e-5, 1e-6));
  EXPECT_NE(d->describe().find("in [0, 1], normalized (x - 0.286) / 0.353"), std::string::npos) << d->describe();
  src.mean_std = {{0.1, 0.2}, {0.3}};
  expect_data_error([&] { load_dataset(src, TargetKind::kClassIndex); },
                    {"normalize mean has 2 values, but a sample's first dimension has 1 (input_shape [1, 28, 28])"});
}

}  // namespace
}  // namespace bagua
