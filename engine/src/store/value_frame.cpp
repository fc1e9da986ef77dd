#include "store/value_frame.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace bagua::store {
namespace {

constexpr char kMagic[4] = {'B', 'G', 'V', '1'};
constexpr size_t kHeaderBytes = sizeof(kMagic) + sizeof(uint64_t) + sizeof(uint32_t);

uint32_t crc_of(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed large payloads in pieces.
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const uInt piece = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(p), piece);
    p += piece;
    left -= piece;
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace

std::string frame_value(std::string_view payload) {
  std::string out(kHeaderBytes + payload.size(), '\0');
  const uint64_t length = payload.size();
  const uint32_t crc = crc_of(payload);
  char* p = out.data();
  std::memcpy(p, kMagic, sizeof(kMagic));
  std::memcpy(p + sizeof(kMagic), &length, sizeof(length));
  std::memcpy(p + sizeof(kMagic) + sizeof(length), &crc, sizeof(crc));
  if (!payload.empty()) std::memcpy(p + kHeaderBytes, payload.data(), payload.size());
  return out;
}

std::optional<std::string> unframe_value(std::string_view framed) {
  if (framed.size() < kHeaderBytes || std::memcmp(framed.data(), kMagic, sizeof(kMagic)) != 0) return std::nullopt;
  uint64_t length = 0;
  uint32_t crc = 0;
  std::memcpy(&length, framed.data() + sizeof(kMagic), sizeof(length));
  std::memcpy(&crc, framed.data() + sizeof(kMagic) + sizeof(length), sizeof(crc));
  if (length != framed.size() - kHeaderBytes) return std::nullopt;
  std::string_view payload = framed.substr(kHeaderBytes);
  if (crc_of(payload) != crc) return std::nullopt;
  return std::string(payload);
}

}  // namespace bagua::store
