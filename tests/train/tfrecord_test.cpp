// TFRecord framing, the container of TensorBoard event files
// (train/tfrecord.h).
#include "support/bagua_run.h"
#include "train/tfrecord.h"

#include <bagua/errors.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace {

using bagua::testing::contains;

TEST(TFRecordFraming, Crc32cAndMaskAndLayout) {
  const char check[] = "123456789";
  EXPECT_EQ(bagua::train::crc32c(check, 9), 0xE3069283u) << "CRC-32C check value (RFC 3720 B.4)";
  const uint32_t c = bagua::train::crc32c(check, 9);
  EXPECT_EQ(bagua::train::masked_crc32c(check, 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
  const std::string framed = bagua::train::tfrecord_frame("abc");
  ASSERT_EQ(framed.size(), 8u + 4 + 3 + 4);
  uint64_t length = 0;
  std::memcpy(&length, framed.data(), 8);  // little-endian host, as the format
  EXPECT_EQ(length, 3u);
  uint32_t length_crc = 0, data_crc = 0;
  std::memcpy(&length_crc, framed.data() + 8, 4);
  std::memcpy(&data_crc, framed.data() + 15, 4);
  EXPECT_EQ(length_crc, bagua::train::masked_crc32c(framed.data(), 8));
  EXPECT_EQ(framed.substr(12, 3), "abc");
  EXPECT_EQ(data_crc, bagua::train::masked_crc32c("abc", 3));
}

TEST(TFRecordFraming, AFailedWriteIsAnErrorNamingTheFile) {
  bagua::train::TFRecordFile full("/dev/full");  // every write: no space left
  try {
    full.write("abc");
    ADD_FAILURE() << "writing to /dev/full succeeded";
  } catch (const bagua::Error& e) {
    EXPECT_TRUE(contains(e.what(), "/dev/full")) << e.what();
    EXPECT_TRUE(e.is_user_error());
  }
}

}  // namespace
