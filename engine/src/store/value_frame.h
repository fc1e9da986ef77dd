// The frame around every value a CacheLoader stores, so a truncated or
// corrupted value is detected instead of used: "BGV1", the payload's length
// (uint64, little-endian as the host writes it) and its CRC-32 (zlib's),
// then the payload.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace bagua::store {

std::string frame_value(std::string_view payload);

// The payload, or nullopt when `framed` is not a whole, intact frame.
std::optional<std::string> unframe_value(std::string_view framed);

}  // namespace bagua::store
