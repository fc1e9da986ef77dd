// One decoded sample as bytes, for the dataset cache: the tag of the data
// set it came from, its padding count, then its input and target tensors,
// each as dtype (1 byte), rank (1 byte), sizes (int64 each) and raw
// contiguous bytes. Integrity (length, CRC) is the cache frame's job
// (store/value_frame.h); decoding still checks every size against the bytes
// it has, so a value of another layout is refused, never misread.
#pragma once

#include <bagua/data.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace bagua::data {

// `sample` is a batch of one sample (get_batch({i})), on the CPU.
std::string encode_sample(const Batch& sample, uint64_t tag);

enum class SampleStatus {
  kOk,
  kOtherTag,   // a well-formed sample of another data set
  kMalformed,  // not a sample this codec wrote
};

struct DecodedSample {
  SampleStatus status = SampleStatus::kMalformed;
  Batch sample;  // set when kOk
};

DecodedSample decode_sample(std::string_view bytes, uint64_t tag);

}  // namespace bagua::data
