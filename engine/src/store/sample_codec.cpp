#include "store/sample_codec.h"

#include <cstring>
#include <vector>

namespace bagua::data {
namespace {

constexpr char kMagic[4] = {'B', 'G', 'S', '1'};
constexpr int kMaxRank = 16;

template <typename T>
void append(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void append_tensor(std::string& out, const at::Tensor& tensor) {
  at::Tensor t = tensor.contiguous();
  append(out, static_cast<uint8_t>(t.scalar_type()));
  append(out, static_cast<uint8_t>(t.dim()));
  for (int64_t size : t.sizes()) append(out, size);
  out.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
}

// Reads fixed-size values and tensors off the front of a byte range;
// every read checks it has the bytes.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}

  template <typename T>
  bool read(T& value) {
    if (bytes_.size() < sizeof(T)) return false;
    std::memcpy(&value, bytes_.data(), sizeof(T));
    bytes_.remove_prefix(sizeof(T));
    return true;
  }

  bool read_tensor(at::Tensor& tensor) {
    uint8_t type = 0, rank = 0;
    if (!read(type) || !read(rank) || rank > kMaxRank) return false;
    if (type >= static_cast<uint8_t>(at::ScalarType::NumOptions)) return false;
    const auto scalar_type = static_cast<at::ScalarType>(type);
    switch (scalar_type) {
      case at::kByte: case at::kChar: case at::kShort: case at::kInt: case at::kLong:
      case at::kHalf: case at::kFloat: case at::kDouble: case at::kBool: case at::kBFloat16:
        break;
      default:
        return false;
    }
    std::vector<int64_t> sizes(rank);
    for (auto& size : sizes) {
      if (!read(size) || size < 0) return false;
    }
    // The element count, refused as soon as it passes what the bytes left
    // can hold (so a product of huge sizes never wraps to a small count).
    const uint64_t element_bytes = c10::elementSize(scalar_type);
    const uint64_t most = bytes_.size() / element_bytes;
    uint64_t elements = 1;
    for (int64_t size : sizes) {
      if (size == 0) {
        elements = 0;
        break;
      }
      if (elements > most / static_cast<uint64_t>(size)) return false;
      elements *= static_cast<uint64_t>(size);
    }
    const uint64_t nbytes = elements * element_bytes;
    if (bytes_.size() < nbytes) return false;
    tensor = at::empty(sizes, at::TensorOptions().dtype(scalar_type));
    if (nbytes > 0) std::memcpy(tensor.data_ptr(), bytes_.data(), nbytes);
    bytes_.remove_prefix(nbytes);
    return true;
  }

  bool done() const { return bytes_.empty(); }

 private:
  std::string_view bytes_;
};

}  // namespace

std::string encode_sample(const Batch& sample, uint64_t tag) {
  std::string out(kMagic, sizeof(kMagic));
  append(out, tag);
  append(out, sample.padding);
  append_tensor(out, sample.input);
  append_tensor(out, sample.target);
  return out;
}

DecodedSample decode_sample(std::string_view bytes, uint64_t tag) {
  DecodedSample decoded;
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) return decoded;
  Reader reader(bytes.substr(sizeof(kMagic)));
  uint64_t stored_tag = 0;
  Batch sample;
  if (!reader.read(stored_tag) || !reader.read(sample.padding)) return decoded;
  if (stored_tag != tag) {
    decoded.status = SampleStatus::kOtherTag;
    return decoded;
  }
  if (!reader.read_tensor(sample.input) || !reader.read_tensor(sample.target) || !reader.done()) return decoded;
  if (sample.input.dim() < 1 || sample.target.dim() < 1 || sample.input.size(0) != 1 || sample.target.size(0) != 1)
    return decoded;
  decoded.status = SampleStatus::kOk;
  decoded.sample = std::move(sample);
  return decoded;
}

}  // namespace bagua::data
