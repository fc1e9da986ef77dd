// The dataset cache's sample codec (store/sample_codec.h): what it wrote
// comes back; anything else, however it is shaped, is refused as malformed
// (the cache then decodes from the source), never misread or allocated.
#include "store/sample_codec.h"

#include <gtest/gtest.h>
#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

using bagua::data::SampleStatus;

bagua::Batch one_sample() {
  bagua::Batch b;
  b.input = at::arange(6, at::kFloat).reshape({1, 6});
  b.target = at::tensor({int64_t{3}}, at::kLong).reshape({1});
  return b;
}

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// A sample whose input claims `sizes` (float32) over `payload` bytes.
std::string crafted(const std::vector<int64_t>& sizes, size_t payload, uint64_t tag) {
  const std::string good = bagua::data::encode_sample(one_sample(), tag);
  std::string out = good.substr(0, 4 + 8 + 8);  // magic, tag, padding
  put(out, static_cast<uint8_t>(at::kFloat));
  put(out, static_cast<uint8_t>(sizes.size()));
  for (int64_t s : sizes) put(out, s);
  out.append(payload, '\0');
  return out;
}

TEST(SampleCodec, WhatItWritesComesBack) {
  const auto d = bagua::data::decode_sample(bagua::data::encode_sample(one_sample(), 42), 42);
  ASSERT_EQ(d.status, SampleStatus::kOk);
  EXPECT_TRUE(at::equal(d.sample.input, one_sample().input));
  EXPECT_TRUE(at::equal(d.sample.target, one_sample().target));
  EXPECT_EQ(bagua::data::decode_sample(bagua::data::encode_sample(one_sample(), 42), 7).status,
            SampleStatus::kOtherTag);
}

// Sizes whose product wraps around 2^64 to a small count (0 here) claimed
// a few bytes and then an impossible tensor: refused, nothing allocated.
TEST(SampleCodec, SizesWhoseProductOverflowsAreMalformed) {
  const int64_t huge = int64_t{1} << 32;
  for (const auto& sizes : std::vector<std::vector<int64_t>>{
           {huge, huge}, {int64_t{1} << 62, 4}, {std::numeric_limits<int64_t>::max(), 3}, {1, huge, huge, 1}}) {
    bagua::data::DecodedSample d;
    EXPECT_NO_THROW(d = bagua::data::decode_sample(crafted(sizes, 64, 1), 1));
    EXPECT_EQ(d.status, SampleStatus::kMalformed) << sizes[0] << " x " << sizes[1];
  }
  // A size of zero is a valid empty tensor whatever follows it.
  EXPECT_NE(bagua::data::decode_sample(crafted({0, huge}, 0, 1), 1).status, SampleStatus::kOk)
      << "an input of 0 samples is not a sample";
}

}  // namespace
