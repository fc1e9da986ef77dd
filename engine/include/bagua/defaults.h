// Defaults that more than one layer uses, written once.
#pragma once

#include <cstdint>

namespace bagua {

// Bytes per communication bucket unless told otherwise: 10 MiB, as Bagua's.
// The recipe schema's algorithm.bucket_size default ("10MiB") says the same;
// a test keeps them equal.
constexpr int64_t kDefaultBucketBytes = int64_t{10} << 20;

}  // namespace bagua
