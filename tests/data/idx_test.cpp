// IDX loading on the real Fashion-MNIST files (Debian's dataset-fashion-mnist),
// with exact values checked against Python reading the same files.
#include "data/data_test_support.h"

#include <nlohmann/json.hpp>

namespace bagua {
namespace {

const std::string kDir = "/usr/share/datasets/fashion-mnist/";

DataSource fashion(const std::string& split, bool normalize, std::vector<int64_t> shape = {}) {
  DataSource s;
  s.format = DataFormat::kIdx;
  s.images = kDir + split + "-images-idx3-ubyte.gz";
  s.labels = kDir + split + "-labels-idx1-ubyte.gz";
  s.normalize = normalize;
  s.input_shape = std::move(shape);
  return s;
}

// Values read by Python's gzip + struct from the same files.
nlohmann::json python_reference() {
  return nlohmann::json::parse(testing::run_python(
      "import gzip, json\n"
      "d = '" + kDir + "'\n"
      "def read(name):\n"
      "    with gzip.open(d + name) as f: return f.read()\n"
      "ti, tl = read('train-images-idx3-ubyte.gz'), read('train-labels-idx1-ubyte.gz')\n"
      "vi, vl = read('t10k-images-idx3-ubyte.gz'), read('t10k-labels-idx1-ubyte.gz')\n"
      "px = lambda b, i: b[16 + 784 * i: 16 + 784 * (i + 1)]\n"
      "print(json.dumps({\n"
      "  'label_12345': tl[8 + 12345], 'sum_0': sum(px(ti, 0)), 'sum_59999': sum(px(ti, 59999)),\n"
      "  'pixel_0_400': px(ti, 0)[400], 'test_label_9999': vl[8 + 9999], 'test_sum_17': sum(px(vi, 17)),\n"
      "  'test_pixel_17_300': px(vi, 17)[300], 'hist': [tl[8:].count(c) for c in range(10)]}))\n"));
}

TEST(IdxDataset, FashionMnistMatchesPython) {
  nlohmann::json want = python_reference();

  auto train = load_dataset(fashion("train", /*normalize=*/false), TargetKind::kClassIndex);
  EXPECT_EQ(train->size(), 60000);
  EXPECT_EQ(train->num_classes(), 10);
  EXPECT_EQ(train->describe(),
            "idx train-images-idx3-ubyte.gz: 60000 samples, input [784] float32 in [0, 255], "
            "target int64 (10 classes)");
  Batch b = train->get_batch({12345, 0, 59999});
  EXPECT_EQ(b.input.scalar_type(), at::kFloat);
  EXPECT_EQ(b.input.sizes(), (std::vector<int64_t>{3, 784}));
  EXPECT_EQ(b.target.scalar_type(), at::kLong);
  EXPECT_EQ(b.target.sizes(), (std::vector<int64_t>{3}));
  EXPECT_EQ(b.target[0].item<int64_t>(), want["label_12345"].get<int64_t>());
  EXPECT_EQ(b.input[1].sum().item<double>(), want["sum_0"].get<double>());
  EXPECT_EQ(b.input[2].sum().item<double>(), want["sum_59999"].get<double>());
  EXPECT_EQ(b.input[1][400].item<float>(), want["pixel_0_400"].get<float>());
  EXPECT_GT(b.input.max().item<float>(), 1.0f);  // raw 0..255

  // Class histogram over the whole set, batch by batch.
  std::vector<int64_t> all(60000);
  for (int64_t i = 0; i < 60000; ++i) all[i] = i;
  at::Tensor labels = train->get_batch(all).target;
  at::Tensor hist = at::bincount(labels, {}, 10);
  EXPECT_EQ(std::vector<int64_t>(hist.data_ptr<int64_t>(), hist.data_ptr<int64_t>() + 10),
            want["hist"].get<std::vector<int64_t>>());

  auto test = load_dataset(fashion("t10k", /*normalize=*/true, {1, 28, 28}), TargetKind::kClassIndex);
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(test->num_classes(), 10);
  Batch t = test->get_batch({9999, 17});
  EXPECT_EQ(t.input.sizes(), (std::vector<int64_t>{2, 1, 28, 28}));
  EXPECT_EQ(t.target[0].item<int64_t>(), want["test_label_9999"].get<int64_t>());
  EXPECT_FLOAT_EQ(t.input[1].sum().item<float>() * 255.0f, want["test_sum_17"].get<float>());
  // Pixel 300 of a flat image is row 10, column 20.
  EXPECT_EQ(t.input[1][0][10][20].item<float>(), want["test_pixel_17_300"].get<float>() / 255.0f);
  EXPECT_GE(t.input.min().item<float>(), 0.0f);
  EXPECT_LE(t.input.max().item<float>(), 1.0f);
}

TEST(IdxDataset, FloatTargetsAndUncompressedFiles) {
  // The same records, uncompressed: IDX files need not be gzipped.
  testing::TempDir dir;
  std::string py =
      "import gzip\n"
      "for name in ['t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte']:\n"
      "    open('" + dir.path() + "/' + name, 'wb').write(gzip.open('" + kDir + "' + name + '.gz').read())\n";
  testing::run_python(py);
  DataSource raw;
  raw.images = dir.file("t10k-images-idx3-ubyte");
  raw.labels = dir.file("t10k-labels-idx1-ubyte");
  auto plain = load_dataset(raw, TargetKind::kFloat);
  auto zipped = load_dataset(fashion("t10k", true), TargetKind::kClassIndex);
  EXPECT_EQ(plain->num_classes(), 0);
  Batch a = plain->get_batch({3, 1, 4, 1, 5});
  Batch b = zipped->get_batch({3, 1, 4, 1, 5});
  EXPECT_TRUE(at::equal(a.input, b.input));
  EXPECT_EQ(a.target.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(a.target, b.target.to(at::kFloat)));
  EXPECT_THROW(plain->get_batch({10000}), InvalidArgument);
  EXPECT_THROW(plain->get_batch({-1}), InvalidArgument);
}

}  // namespace
}  // namespace bagua
