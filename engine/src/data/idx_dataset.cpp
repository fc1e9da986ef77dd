// IDX files (the MNIST format): a big-endian header (magic 0x000008DD where
// DD is the number of dimensions, then one uint32 size per dimension)
// followed by unsigned bytes. Files starting with the gzip magic 1f 8b are
// inflated with zlib first.
//
// The images stay in memory as raw uint8 and are converted per batch, so a
// worker holds 1 byte per pixel rather than 4.
#include "data/dataset_impl.h"

#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <sstream>

namespace bagua::data {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

uint32_t big_endian32(const std::vector<char>& bytes, size_t offset) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(bytes[offset + i])); };
  return (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
}

bool is_gzip(const std::vector<char>& bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

// Inflates a gzip file (one or more members).
std::vector<char> gunzip(const std::vector<char>& in, const std::string& path) {
  std::vector<char> out;
  // The trailer's ISIZE (size mod 2^32, little-endian) is a good first guess,
  // when it is one: in a truncated or corrupt file those 4 bytes are anything
  // (a cut file of 260 bytes asked for 4 GiB), so a guess beyond what
  // deflate can inflate that much input to (at most 1032:1) is ignored.
  if (in.size() >= 18) {
    size_t n = in.size();
    uint32_t isize = static_cast<uint32_t>(static_cast<unsigned char>(in[n - 4])) |
                     (static_cast<uint32_t>(static_cast<unsigned char>(in[n - 3])) << 8) |
                     (static_cast<uint32_t>(static_cast<unsigned char>(in[n - 2])) << 16) |
                     (static_cast<uint32_t>(static_cast<unsigned char>(in[n - 1])) << 24);
    constexpr uint64_t kMaxDeflateRatio = 1032;
    if (isize <= kMaxDeflateRatio * static_cast<uint64_t>(n)) out.reserve(isize);
  }
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw Error("zlib: inflateInit2 failed");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  constexpr size_t kChunk = 1 << 20;
  for (;;) {
    size_t have = out.size();
    out.resize(have + kChunk);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + have);
    zs.avail_out = static_cast<uInt>(kChunk);
    int ret = inflate(&zs, Z_NO_FLUSH);
    out.resize(have + (kChunk - zs.avail_out));
    if (ret == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      inflateReset(&zs);  // another gzip member follows
      continue;
    }
    if (ret == Z_OK) continue;
    if (ret == Z_BUF_ERROR && zs.avail_in == 0) {
      inflateEnd(&zs);
      throw DataError(path + ": truncated gzip stream: the compressed data ends at byte " +
                      std::to_string(in.size()) + " before the end of the stream (" +
                      std::to_string(out.size()) + " bytes inflated)");
    }
    std::string why = zs.msg ? zs.msg : "error " + std::to_string(ret);
    size_t offset = in.size() - zs.avail_in;
    inflateEnd(&zs);
    throw DataError(path + ": corrupt gzip data at compressed byte offset " +
                    std::to_string(offset) + ": " + why);
  }
  inflateEnd(&zs);
  return out;
}

std::vector<char> read_idx_bytes(const std::string& path) {
  std::vector<char> bytes = read_file(path);
  return is_gzip(bytes) ? gunzip(bytes, path) : bytes;
}

std::string describe_magic(uint32_t magic) {
  if (magic == kImagesMagic) return " (an IDX image file)";
  if (magic == kLabelsMagic) return " (an IDX label file)";
  return "";
}

// Checks the header of an IDX file of unsigned bytes with `dims.size()`
// dimensions and that the payload matches it exactly; fills `dims` and
// returns the offset of the first record.
size_t check_idx(const std::vector<char>& bytes, const std::string& path, uint32_t magic,
                 const char* what, std::vector<int64_t>& dims) {
  size_t header = 4 + 4 * dims.size();
  if (bytes.size() < 4)
    throw DataError(path + ": too short for an IDX header: " + std::to_string(bytes.size()) +
                    " bytes");
  uint32_t found = big_endian32(bytes, 0);
  if (found != magic)
    throw DataError(path + ": not an IDX " + what + " file: expected magic " + hex32(magic) +
                    " at byte offset 0, found " + hex32(found) + describe_magic(found));
  if (bytes.size() < header)
    throw DataError(path + ": truncated IDX header: expected " + std::to_string(header) +
                    " bytes, found " + std::to_string(bytes.size()));
  int64_t record = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    dims[i] = big_endian32(bytes, 4 + 4 * i);
    if (i > 0) record *= dims[i];
  }
  for (size_t i = 1; i < dims.size(); ++i)
    if (dims[i] == 0)
      throw DataError(path + ": dimension " + std::to_string(i) +
                      " of the IDX header (byte offset " + std::to_string(4 + 4 * i) + ") is 0");
  int64_t count = dims[0];
  uint64_t expected = header + static_cast<uint64_t>(count) * static_cast<uint64_t>(record);
  if (bytes.size() < expected) {
    int64_t complete = static_cast<int64_t>(bytes.size() - header) / record;
    throw DataError(path + ": truncated: the header declares " + std::to_string(count) + " " +
                    what + "s (" + std::to_string(expected) + " bytes), but the file ends at byte " +
                    std::to_string(bytes.size()) + ", inside record " + std::to_string(complete) +
                    " (which starts at byte offset " + std::to_string(header + complete * record) +
                    ")");
  }
  if (bytes.size() > expected)
    throw DataError(path + ": " + std::to_string(bytes.size() - expected) +
                    " unexpected bytes after the last of " + std::to_string(count) + " " + what +
                    "s (from byte offset " + std::to_string(expected) + ")");
  if (count == 0) throw DataError(path + ": holds no " + std::string(what) + "s");
  return header;
}

class IdxDataset : public Dataset {
 public:
  IdxDataset(std::string label, at::Tensor pixels, std::vector<int64_t> shape, bool normalize,
             at::Tensor target, TargetKind kind, int64_t num_classes)
      : label_(std::move(label)),
        pixels_(std::move(pixels)),
        shape_(std::move(shape)),
        normalize_(normalize),
        target_(std::move(target)),
        kind_(kind),
        num_classes_(num_classes) {}

  int64_t size() const override { return pixels_.size(0); }

  Batch get_batch(const std::vector<int64_t>& indices) const override {
    at::Tensor idx = index_tensor(indices, size());
    at::Tensor input = pixels_.index_select(0, idx).to(at::kFloat);
    if (normalize_) input.div_(255.0);
    std::vector<int64_t> batch_shape{static_cast<int64_t>(indices.size())};
    batch_shape.insert(batch_shape.end(), shape_.begin(), shape_.end());
    return {input.view(batch_shape), target_.index_select(0, idx)};
  }

  std::string describe() const override {
    std::ostringstream s;
    s << label_ << ": " << size() << " samples, input " << shape_string(shape_) << " float32"
      << (normalize_ ? " in [0, 1]" : " in [0, 255]") << ", "
      << describe_target(kind_, {}, num_classes_);
    return s.str();
  }

  int64_t num_classes() const override { return num_classes_; }
  int64_t memory_bytes() const override { return pixels_.nbytes() + target_.nbytes(); }

 private:
  std::string label_;
  at::Tensor pixels_;  // uint8 [N, R*C]
  std::vector<int64_t> shape_;
  bool normalize_;
  at::Tensor target_;  // int64 [N] or float32 [N]
  TargetKind kind_;
  int64_t num_classes_;
};

}  // namespace

std::shared_ptr<Dataset> load_idx(const DataSource& source, TargetKind kind) {
  std::vector<char> images = read_idx_bytes(source.images);
  std::vector<int64_t> image_dims(3);
  size_t image_offset = check_idx(images, source.images, kImagesMagic, "image", image_dims);

  std::vector<char> labels = read_idx_bytes(source.labels);
  std::vector<int64_t> label_dims(1);
  size_t label_offset = check_idx(labels, source.labels, kLabelsMagic, "label", label_dims);

  if (image_dims[0] != label_dims[0])
    throw DataError(source.images + " holds " + std::to_string(image_dims[0]) + " images but " +
                    source.labels + " holds " + std::to_string(label_dims[0]) +
                    " labels: expected one label per image");

  int64_t n = image_dims[0];
  int64_t pixels_per_image = image_dims[1] * image_dims[2];
  std::vector<int64_t> shape = sample_shape(source.input_shape, pixels_per_image, source.images);

  at::Tensor pixels = at::empty({n, pixels_per_image}, at::kByte);
  std::memcpy(pixels.data_ptr<uint8_t>(), images.data() + image_offset,
              static_cast<size_t>(n * pixels_per_image));
  images = {};

  at::Tensor raw_labels = at::empty({n}, at::kByte);
  std::memcpy(raw_labels.data_ptr<uint8_t>(), labels.data() + label_offset, static_cast<size_t>(n));
  int64_t num_classes = 0;
  at::Tensor target;
  if (kind == TargetKind::kClassIndex) {
    target = raw_labels.to(at::kLong);
    num_classes = target.max().item<int64_t>() + 1;
  } else {
    target = raw_labels.to(at::kFloat);
  }
  return std::make_shared<IdxDataset>("idx " + base_name(source.images), std::move(pixels),
                                      std::move(shape), source.normalize, std::move(target), kind,
                                      num_classes);
}

}  // namespace bagua::data
