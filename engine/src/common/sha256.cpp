// SHA-256 as FIPS 180-4 specifies it: 64-byte blocks, 64 rounds, big-endian
// length padding. Plain C++; fast enough to hash a data set once (the
// cache below keeps it from being hashed again).
#include <bagua/errors.h>
#include <bagua/sha256.h>
#include <bagua/system.h>

#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace bagua {
namespace {

constexpr uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

}  // namespace

Sha256::Sha256()
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::block(const uint8_t* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 | p[4 * i + 3];
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[i] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h_[0] += a, h_[1] += b, h_[2] += c, h_[3] += d, h_[4] += e, h_[5] += f, h_[6] += g, h_[7] += h;
}

void Sha256::update(const void* data, size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  total_ += size;
  if (buffered_ > 0) {
    size_t take = std::min(size, buffer_.size() - buffered_);
    std::memcpy(buffer_.data() + buffered_, p, take);
    buffered_ += take, p += take, size -= take;
    if (buffered_ < buffer_.size()) return;
    block(buffer_.data());
    buffered_ = 0;
  }
  for (; size >= 64; p += 64, size -= 64) block(p);
  std::memcpy(buffer_.data(), p, size);
  buffered_ = size;
}

std::string Sha256::hex() {
  uint64_t bits = total_ * 8;
  uint8_t pad[72] = {0x80};
  size_t pad_len = (buffered_ < 56 ? 56 : 120) - buffered_;
  for (int i = 0; i < 8; ++i) pad[pad_len + i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  update(pad, pad_len + 8);
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint32_t v : h_)
    for (int shift = 28; shift >= 0; shift -= 4) out += digits[(v >> shift) & 0xf];
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 s;
  s.update(bytes);
  return s.hex();
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path + " to hash it: " + std::strerror(errno), true);
  Sha256 s;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) s.update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) throw Error("cannot read " + path + " to hash it: read error", true);
  return s.hex();
}

namespace {

std::string hash_cache_path() {
  if (const char* p = std::getenv("BAGUA_HASH_CACHE"); p && *p) return p;
  if (const char* p = std::getenv("XDG_CACHE_HOME"); p && *p) return std::string(p) + "/bagua/file-sha256.json";
  if (const char* p = std::getenv("HOME"); p && *p) return std::string(p) + "/.cache/bagua/file-sha256.json";
  return "";
}

// What the cache trusts a file by: a file replaced by another of the same
// size with its modification time preserved (cp -p, rsync -a, tar x) has
// another inode, and a new change time, which no tool can set.
nlohmann::json file_stamp(const struct stat& st) {
  auto ns = [](const timespec& t) { return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec; };
  return {{"dev", static_cast<uint64_t>(st.st_dev)}, {"ino", static_cast<uint64_t>(st.st_ino)},
          {"size", static_cast<int64_t>(st.st_size)}, {"mtime_ns", ns(st.st_mtim)}, {"ctime_ns", ns(st.st_ctim)}};
}

}  // namespace

std::string cached_file_sha256(const std::string& path, bool* hashed,
                               const std::function<void(int64_t size)>& before_hashing) {
  namespace fs = std::filesystem;
  if (hashed) *hashed = false;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error("cannot read " + path + " to hash it: " + std::strerror(errno), true);
  std::error_code ec;
  const std::string key = fs::weakly_canonical(path, ec).string();
  const int64_t size = st.st_size;
  const nlohmann::json stamp = file_stamp(st);
  const std::string cache = hash_cache_path();
  nlohmann::json entries = nlohmann::json::object();
  if (!cache.empty()) {
    std::ifstream in(cache);
    if (in) {
      nlohmann::json parsed = nlohmann::json::parse(in, nullptr, false);
      if (parsed.is_object()) entries = std::move(parsed);
    }
    auto it = entries.find(key);
    if (it != entries.end() && it->is_object() && it->contains("stamp") && (*it)["stamp"] == stamp &&
        it->value("sha256", std::string()).size() == 64)
      return (*it)["sha256"].get<std::string>();
  }
  if (before_hashing) before_hashing(size);
  std::string digest = sha256_file(path);
  if (hashed) *hashed = true;
  if (!cache.empty()) {
    // Re-stat: a file changed while it was hashed is not remembered.
    struct stat after {};
    if (::stat(path.c_str(), &after) == 0 && file_stamp(after) == stamp) {
      entries[key] = {{"stamp", stamp}, {"sha256", digest}};
      fs::create_directories(fs::path(cache).parent_path(), ec);
      try {
        write_file_atomically(cache, entries.dump(1) + "\n");
      } catch (const Error&) {
        // a cache that cannot be written costs a re-hash, nothing else
      }
    }
  }
  return digest;
}

}  // namespace bagua
