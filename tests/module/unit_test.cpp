// In-process unit tests: buckets and globs.
#include <bagua/bucket.h>
#include <bagua/distributed.h>
#include <bagua/errors.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

bagua::BaguaTensor tensor_of(const std::string& name, std::vector<int64_t> shape, at::ScalarType dtype,
                             std::shared_ptr<at::Tensor> slot) {
  bagua::BaguaTensor t;
  t.name = name;
  t.shape = shape;
  t.dtype = dtype;
  t.get = [slot] { return *slot; };
  t.set = [slot](const at::Tensor& v) { *slot = v; };
  return t;
}

TEST(Buckets, GreedyByBytesPerDtypeInOrder) {
  std::vector<bagua::BaguaTensor> ts;
  std::vector<std::shared_ptr<at::Tensor>> slots;
  // float 400 B, double 800 B, float 400 B, float 400 B, float 2000 B
  std::vector<std::pair<int64_t, at::ScalarType>> specs = {
      {100, at::kFloat}, {100, at::kDouble}, {100, at::kFloat}, {100, at::kFloat}, {500, at::kFloat}};
  for (size_t i = 0; i < specs.size(); ++i) {
    slots.push_back(std::make_shared<at::Tensor>(torch::zeros({specs[i].first}, specs[i].second)));
    ts.push_back(tensor_of("t" + std::to_string(i), {specs[i].first}, specs[i].second, slots.back()));
  }
  bagua::BucketOptions opts;
  opts.bucket_bytes = 1000;
  auto buckets = bagua::make_buckets(ts, opts);
  ASSERT_EQ(buckets.size(), 4u);
  // Ordered by first tensor: [t0 t2] (800 B; t3 would exceed), [t1], [t3] (t4 would exceed), [t4].
  std::vector<std::vector<std::string>> names;
  for (auto& b : buckets) {
    names.emplace_back();
    for (auto& t : b->tensors()) names.back().push_back(t.name);
  }
  EXPECT_EQ(names[0], (std::vector<std::string>{"t0", "t2"}));
  EXPECT_EQ(names[1], (std::vector<std::string>{"t1"}));
  EXPECT_EQ(names[2], (std::vector<std::string>{"t3"}));
  EXPECT_EQ(names[3], (std::vector<std::string>{"t4"}));
  opts.bucket_bytes = 1;  // every tensor alone
  EXPECT_EQ(bagua::make_buckets(ts, opts).size(), ts.size());
}

TEST(Buckets, FlattenMakesTensorsAliasesOfOneBufferAndPadsToAlignment) {
  auto a = std::make_shared<at::Tensor>(torch::arange(6, torch::kFloat).view({2, 3}));
  auto b = std::make_shared<at::Tensor>(torch::arange(4, torch::kFloat) + 10);
  bagua::Bucket bucket("b", {tensor_of("a", {2, 3}, at::kFloat, a), tensor_of("b", {4}, at::kFloat, b)}, true, 4);
  EXPECT_EQ(bucket.numel(), 10);
  EXPECT_EQ(bucket.padded_numel(), 12);
  at::Tensor flat = bucket.flat();
  EXPECT_TRUE(torch::equal(flat, torch::cat({torch::arange(6, torch::kFloat), torch::arange(4, torch::kFloat) + 10,
                                             torch::zeros({2})})));
  flat.mul_(2);  // writing the buffer writes the registered tensors
  EXPECT_TRUE(torch::equal(*a, torch::arange(6, torch::kFloat).view({2, 3}) * 2));
  // Optimizers zero gradients with detach_() + zero_(): allowed on our aliases.
  a->detach_();
  a->zero_();
  EXPECT_EQ(flat.narrow(0, 0, 6).abs().sum().item<float>(), 0.f);
  // A replaced tensor is copied back into the buffer on attach().
  *b = torch::full({4}, 7.f);
  bucket.attach();
  EXPECT_TRUE(torch::equal(flat.narrow(0, 6, 4), torch::full({4}, 7.f)));
  EXPECT_TRUE(b->storage().is_alias_of(flat.storage()));
}

// A flattened bucket of one tensor and no padding owns no buffer: it
// communicates the tensor where it lies, so a gradient that backward wrote
// afresh (after zero_grad set it to none) is never copied.
TEST(Buckets, OneTensorBucketIsItsTensorWhereverItLies) {
  auto a = std::make_shared<at::Tensor>(torch::arange(6, torch::kFloat).view({2, 3}));
  const void* first = a->data_ptr();
  bagua::Bucket bucket("b", {tensor_of("a", {2, 3}, at::kFloat, a)}, true, 1);
  ASSERT_TRUE(bucket.direct());
  bucket.attach();
  EXPECT_EQ(a->data_ptr(), first);  // not moved
  at::Tensor flat = bucket.flat();
  EXPECT_EQ(flat.data_ptr(), first);
  EXPECT_EQ(flat.numel(), 6);
  flat.mul_(2);
  EXPECT_TRUE(torch::equal(*a, torch::arange(6, torch::kFloat).view({2, 3}) * 2));
  *a = torch::full({2, 3}, 7.f);  // set to none, then written afresh
  const void* fresh = a->data_ptr();
  bucket.attach(0);
  EXPECT_EQ(a->data_ptr(), fresh);
  EXPECT_EQ(bucket.flat().data_ptr(), fresh);
  *a = at::Tensor();  // no gradient: zeros, as a zeroed one
  bucket.attach();
  ASSERT_TRUE(a->defined());
  EXPECT_TRUE(torch::equal(*a, torch::zeros({2, 3})));
  *a = torch::arange(6, torch::kFloat).view({3, 2}).t();  // not contiguous: made so
  bucket.attach();
  EXPECT_TRUE(a->is_contiguous());
  EXPECT_TRUE(torch::equal(bucket.flat(), torch::tensor({0.f, 2.f, 4.f, 1.f, 3.f, 5.f})));
  // Padding (or a second tensor) needs a buffer of its own.
  EXPECT_FALSE(bagua::Bucket("p", {tensor_of("a", {2, 3}, at::kFloat, a)}, true, 4).direct());
  EXPECT_FALSE(bagua::Bucket("u", {tensor_of("a", {2, 3}, at::kFloat, a)}, false, 1).direct());
}

// In a bucket of several tensors, attach(i) copies the i-th alone into the
// buffer (BaguaModule calls it as each gradient becomes ready).
TEST(Buckets, AttachOneCopiesThatTensorAlone) {
  auto a = std::make_shared<at::Tensor>(torch::ones({2}));
  auto b = std::make_shared<at::Tensor>(torch::ones({3}));
  bagua::Bucket bucket("b", {tensor_of("a", {2}, at::kFloat, a), tensor_of("b", {3}, at::kFloat, b)}, true, 1);
  ASSERT_FALSE(bucket.direct());
  at::Tensor flat = bucket.flat();
  *a = torch::full({2}, 5.f);
  *b = torch::full({3}, 6.f);
  bucket.attach(1);
  EXPECT_TRUE(torch::equal(flat, torch::tensor({1.f, 1.f, 6.f, 6.f, 6.f})));
  EXPECT_TRUE(b->storage().is_alias_of(flat.storage()));
  EXPECT_FALSE(a->storage().is_alias_of(flat.storage()));
}

TEST(Buckets, WithoutFlattenOperationsCopyInAndOut) {
  auto a = std::make_shared<at::Tensor>(torch::ones({3}));
  bagua::Bucket bucket("b", {tensor_of("a", {3}, at::kFloat, a)}, false, 1);
  at::Tensor flat = bucket.flat();
  flat.add_(1);
  EXPECT_TRUE(torch::equal(*a, torch::ones({3})));  // a copy
  bucket.write_back(flat);
  EXPECT_TRUE(torch::equal(*a, torch::full({3}, 2.f)));
}

TEST(Buckets, ReadinessCountsEachTensorOnceAndNamesTheMissing) {
  auto a = std::make_shared<at::Tensor>(torch::ones({1})), b = std::make_shared<at::Tensor>(torch::ones({1}));
  bagua::Bucket bucket("b", {tensor_of("a", {1}, at::kFloat, a), tensor_of("b", {1}, at::kFloat, b)}, true, 1);
  EXPECT_FALSE(bucket.mark_ready(0));
  EXPECT_FALSE(bucket.mark_ready(0));
  EXPECT_EQ(bucket.missing(), std::vector<std::string>{"b"});
  EXPECT_TRUE(bucket.mark_ready(1));
  bucket.reset_ready();
  EXPECT_FALSE(bucket.ready());
}

TEST(Glob, StarsAndQuestionMarks) {
  EXPECT_TRUE(bagua::glob_match("head.*", "head.bias"));
  EXPECT_TRUE(bagua::glob_match("*.bias", "layers.3.bias"));
  EXPECT_TRUE(bagua::glob_match("layers.?.weight", "layers.3.weight"));
  EXPECT_FALSE(bagua::glob_match("layers.?.weight", "layers.10.weight"));
  EXPECT_FALSE(bagua::glob_match("head.bias", "head.bias2"));
  EXPECT_TRUE(bagua::glob_match("*", ""));
}

}  // namespace
