// IDX files (the MNIST format): a big-endian header (magic 0x000008DD where
// DD is the number of dimensions, then one uint32 size per dimension)
// followed by unsigned bytes. Files starting with the gzip magic 1f 8b are
// inflated with zlib first.
//
// The images stay in memory as raw uint8 and are converted per batch, so a
// worker holds 1 byte per pixel rather than 4.
#include "data/dataset_impl.h"
#include "common/unique_fd.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <fstream>
#include <functional>
#include <optional>

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

// Reads `path`, inflating it first when it starts with the gzip magic 1f 8b
// (one or more members), and hands the bytes to `sink` in pieces, so the
// compressed file is never held whole: a check keeps only the header, a
// load one copy of the inflated data.
void read_idx_stream(const std::string& path, const std::function<void(const char*, size_t)>& sink) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open: " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const auto size = in.tellg();
  if (size < 0) throw DataError(path + ": cannot read (is it a directory?)");
  in.seekg(0, std::ios::beg);
  constexpr size_t kChunk = 1 << 20;
  std::vector<char> input(kChunk);
  auto fill = [&]() -> size_t {
    in.read(input.data(), static_cast<std::streamsize>(input.size()));
    if (in.bad()) throw DataError(path + ": read error");
    return static_cast<size_t>(in.gcount());
  };
  size_t have = fill();
  const bool gzip = have >= 2 && static_cast<unsigned char>(input[0]) == 0x1f &&
                    static_cast<unsigned char>(input[1]) == 0x8b;
  if (!gzip) {
    while (have > 0) {
      sink(input.data(), have);
      have = fill();
    }
    return;
  }
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw Error("zlib: inflateInit2 failed");
  std::vector<char> output(kChunk);
  uint64_t consumed = 0, inflated = 0;
  auto finish = [&] { inflateEnd(&zs); };
  zs.next_in = reinterpret_cast<Bytef*>(input.data());
  zs.avail_in = static_cast<uInt>(have);
  bool output_full = false;  // the last inflate() may have more to give without new input
  for (;;) {
    if (zs.avail_in == 0 && !output_full) {
      consumed += have;
      have = fill();
      if (have == 0) {
        finish();
        throw DataError(path + ": truncated gzip stream: the compressed data ends at byte " +
                        std::to_string(consumed) + " before the end of the stream (" + std::to_string(inflated) +
                        " bytes inflated)");
      }
      zs.next_in = reinterpret_cast<Bytef*>(input.data());
      zs.avail_in = static_cast<uInt>(have);
    }
    zs.next_out = reinterpret_cast<Bytef*>(output.data());
    zs.avail_out = static_cast<uInt>(output.size());
    int ret = inflate(&zs, Z_NO_FLUSH);
    const size_t produced = output.size() - zs.avail_out;
    output_full = zs.avail_out == 0;
    inflated += produced;
    if (produced > 0) sink(output.data(), produced);
    if (ret == Z_STREAM_END) {
      if (zs.avail_in == 0) {
        consumed += have;
        have = fill();
        if (have == 0) break;
        zs.next_in = reinterpret_cast<Bytef*>(input.data());
        zs.avail_in = static_cast<uInt>(have);
      }
      inflateReset(&zs);  // another gzip member follows
      continue;
    }
    if (ret == Z_OK || (ret == Z_BUF_ERROR && zs.avail_in == 0)) continue;
    std::string why = zs.msg ? zs.msg : "error " + std::to_string(ret);
    const uint64_t offset = consumed + (have - zs.avail_in);
    finish();
    throw DataError(path + ": corrupt gzip data at compressed byte offset " + std::to_string(offset) + ": " + why);
  }
  finish();
}

// The whole file, inflated, in one buffer (the gzip trailer's size, when
// plausible, reserves it up front).
std::shared_ptr<std::vector<char>> read_idx_bytes(const std::string& path) {
  auto bytes = std::make_shared<std::vector<char>>();
  std::ifstream probe(path, std::ios::binary);
  if (probe) {
    unsigned char head[2] = {0, 0}, tail[4] = {0, 0, 0, 0};
    probe.read(reinterpret_cast<char*>(head), 2);
    probe.seekg(0, std::ios::end);
    const auto size = probe.tellg();
    if (head[0] == 0x1f && head[1] == 0x8b && size >= 18) {
      probe.seekg(static_cast<std::streamoff>(size) - 4);
      probe.read(reinterpret_cast<char*>(tail), 4);
      const uint32_t isize = tail[0] | (tail[1] << 8) | (tail[2] << 16) | (static_cast<uint32_t>(tail[3]) << 24);
      // In a cut or corrupt file those 4 bytes are anything: ignore a size
      // beyond what deflate can inflate that much input to (at most 1032:1).
      if (isize <= 1032ull * static_cast<uint64_t>(size)) bytes->reserve(isize);
    } else if (size > 0) {
      bytes->reserve(static_cast<size_t>(size));
    }
  }
  read_idx_stream(path, [&](const char* p, size_t n) { bytes->insert(bytes->end(), p, p + n); });
  return bytes;
}

std::string describe_magic(uint32_t magic) {
  if (magic == kImagesMagic) return " (an IDX image file)";
  if (magic == kLabelsMagic) return " (an IDX label file)";
  return "";
}

// Checks the header of an IDX file of unsigned bytes with `dims.size()`
// dimensions and that the payload matches it exactly; fills `dims` and
// returns the offset of the first record.
// `bytes` holds the file's first bytes (at least the header, when the file
// is that long), `total` its inflated size.
size_t check_idx(const std::vector<char>& bytes, uint64_t total, const std::string& path, uint32_t magic,
                 const char* what, std::vector<int64_t>& dims) {
  size_t header = 4 + 4 * dims.size();
  if (total < 4)
    throw DataError(path + ": too short for an IDX header: " + std::to_string(total) +
                    " bytes");
  uint32_t found = big_endian32(bytes, 0);
  if (found != magic)
    throw DataError(path + ": not an IDX " + what + " file: expected magic " + hex32(magic) +
                    " at byte offset 0, found " + hex32(found) + describe_magic(found));
  if (total < header)
    throw DataError(path + ": truncated IDX header: expected " + std::to_string(header) +
                    " bytes, found " + std::to_string(total));
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
  if (total < expected) {
    int64_t complete = static_cast<int64_t>(total - header) / record;
    throw DataError(path + ": truncated: the header declares " + std::to_string(count) + " " +
                    what + "s (" + std::to_string(expected) + " bytes), but the file ends at byte " +
                    std::to_string(total) + ", inside record " + std::to_string(complete) +
                    " (which starts at byte offset " + std::to_string(header + complete * record) +
                    ")");
  }
  if (total > expected)
    throw DataError(path + ": " + std::to_string(total - expected) +
                    " unexpected bytes after the last of " + std::to_string(count) + " " + what +
                    "s (from byte offset " + std::to_string(expected) + ")");
  if (count == 0) throw DataError(path + ": holds no " + std::string(what) + "s");
  return header;
}

// normalize's {mean, std} for images of `shape` (checked).
MeanStdNormalizer normalizer(const DataSource& source, const std::vector<int64_t>& shape) {
  return MeanStdNormalizer(source.mean_std, shape, source.images,
                           source.input_shape.empty() ? "a flat image" : "input_shape " + shape_string(shape));
}

class IdxDataset : public Dataset {
 public:
  IdxDataset(std::string label, at::Tensor pixels, std::vector<int64_t> shape, bool normalize,
             MeanStdNormalizer mean_std, at::Tensor target, TargetKind kind, int64_t num_classes)
      : label_(std::move(label)),
        pixels_(std::move(pixels)),
        shape_(std::move(shape)),
        normalize_(normalize),
        mean_std_(std::move(mean_std)),
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
    input = input.view(batch_shape);
    mean_std_.apply(input);
    return {input, target_.index_select(0, idx)};
  }

  std::string describe() const override {
    std::ostringstream s;
    s << label_ << ": " << size() << " samples, input " << shape_string(shape_) << " float32"
      << (normalize_ ? " in [0, 1]" : " in [0, 255]") << mean_std_.description() << ", "
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
  MeanStdNormalizer mean_std_;
  at::Tensor target_;  // int64 [N] or float32 [N]
  TargetKind kind_;
  int64_t num_classes_;
};

}  // namespace

namespace {

// The file streamed through once: its first `keep` bytes, its inflated
// size and, when `copy` is an open descriptor, every byte written to it
// (`copied`: all of them went in).
struct Streamed {
  std::vector<char> head;
  uint64_t total = 0;
  bool copied = false;
};
Streamed stream_idx(const std::string& path, size_t keep, int copy) {
  Streamed s;
  s.copied = copy >= 0;
  read_idx_stream(path, [&](const char* p, size_t n) {
    if (s.head.size() < keep) s.head.insert(s.head.end(), p, p + std::min(n, keep - s.head.size()));
    s.total += n;
    while (s.copied && n > 0) {
      ssize_t w = ::write(copy, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        s.copied = false;
        break;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  });
  return s;
}

void check_counts(const DataSource& source, int64_t images, int64_t labels) {
  if (images != labels)
    throw DataError(source.images + " holds " + std::to_string(images) + " images but " + source.labels +
                    " holds " + std::to_string(labels) + " labels: expected one label per image");
}

// An empty memfd for `path`'s inflated contents (not close-on-exec: the
// workers inherit it); invalid when the kernel has none to give.
UniqueFd new_memfd(const std::string& path) {
  return UniqueFd(
      static_cast<int>(::syscall(SYS_memfd_create, ("bagua-data:" + base_name(path)).c_str(), MFD_ALLOW_SEALING)));
}

// The fd BAGUA_SHARED_DATA names for `path`, or -1.
int shared_fd_for(const std::string& path) {
  const char* env = std::getenv(kSharedDataEnv);
  if (!env) return -1;
  std::istringstream lines(env);
  std::string line;
  while (std::getline(lines, line)) {
    auto space = line.find(' ');
    if (space == std::string::npos || line.substr(space + 1) != path) continue;
    try {
      return std::stoi(line.substr(0, space));
    } catch (const std::exception&) {
      return -1;
    }
  }
  return -1;
}

// The shared images of `path` mapped read-only, as a byte vector's worth of
// header and the mapping; nullopt when none is shared (or it cannot be
// mapped: then the file is read as usual).
struct Mapped {
  std::vector<char> head;
  uint64_t size = 0;
  void* base = nullptr;
};
std::optional<Mapped> map_shared(const std::string& path, const SharedData* shared) {
  const int fd = shared ? shared->fd_for(path) : shared_fd_for(path);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) return std::nullopt;
  void* base = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return std::nullopt;
  Mapped m;
  m.size = static_cast<uint64_t>(st.st_size);
  m.base = base;
  const char* bytes = static_cast<const char*>(base);
  m.head.assign(bytes, bytes + std::min<uint64_t>(m.size, 16));
  return m;
}

}  // namespace
}  // namespace bagua::data

namespace bagua {

SharedData::~SharedData() {
  for (auto& [path, fd] : files_) ::close(fd);
}

void SharedData::add(const std::string& path, int fd) { files_.emplace_back(path, fd); }

int SharedData::fd_for(const std::string& path) const {
  for (const auto& [p, fd] : files_)
    if (p == path) return fd;
  return -1;
}

std::string SharedData::env_value() const {
  std::string v;
  for (const auto& [path, fd] : files_) v += std::to_string(fd) + " " + path + "\n";
  return v;
}

}  // namespace bagua

namespace bagua::data {

std::string check_idx_files(const DataSource& source, TargetKind kind, SharedData* share) {
  // One pass over the images: the check's header and size, and, for the
  // workers, the shared copy.
  UniqueFd copy = share ? new_memfd(source.images) : UniqueFd();
  Streamed images = stream_idx(source.images, 16, copy.get());
  std::vector<int64_t> image_dims(3);
  check_idx(images.head, images.total, source.images, kImagesMagic, "image", image_dims);
  auto labels = read_idx_bytes(source.labels);  // one byte per sample: small
  std::vector<int64_t> label_dims(1);
  size_t label_offset = check_idx(*labels, labels->size(), source.labels, kLabelsMagic, "label", label_dims);
  check_counts(source, image_dims[0], label_dims[0]);
  std::vector<int64_t> shape = sample_shape(source.input_shape, image_dims[1] * image_dims[2], source.images);
  const MeanStdNormalizer mean_std = normalizer(source, shape);
  int64_t classes = 0;
  for (int64_t i = 0; i < label_dims[0]; ++i)
    classes = std::max<int64_t>(classes, static_cast<unsigned char>((*labels)[label_offset + i]) + 1);
  // Sealed, the copy cannot change under the workers; without it (no memfd,
  // a failed write or seal) they read the file themselves.
  if (images.copied &&
      ::fcntl(copy.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) == 0) {
    share->add(source.images, copy.release());
  }
  return "idx " + base_name(source.images) + ": " + std::to_string(image_dims[0]) + " samples, input " +
         shape_string(shape) + " float32" + mean_std.description() + ", " + describe_target(kind, {}, classes);
}

std::shared_ptr<Dataset> load_idx(const DataSource& source, TargetKind kind, const SharedData* from) {
  // The launcher's shared copy when it made one, else the file.
  std::optional<Mapped> shared = map_shared(source.images, from);
  std::shared_ptr<std::vector<char>> images;
  std::vector<int64_t> image_dims(3);
  size_t image_offset = 0;
  if (shared) {
    image_offset = check_idx(shared->head, shared->size, source.images, kImagesMagic, "image", image_dims);
  } else {
    images = read_idx_bytes(source.images);
    image_offset = check_idx(*images, images->size(), source.images, kImagesMagic, "image", image_dims);
  }

  std::shared_ptr<std::vector<char>> labels = read_idx_bytes(source.labels);
  std::vector<int64_t> label_dims(1);
  size_t label_offset = check_idx(*labels, labels->size(), source.labels, kLabelsMagic, "label", label_dims);

  check_counts(source, image_dims[0], label_dims[0]);

  int64_t n = image_dims[0];
  int64_t pixels_per_image = image_dims[1] * image_dims[2];
  std::vector<int64_t> shape = sample_shape(source.input_shape, pixels_per_image, source.images);

  // The pixels stay where they were inflated: the tensor owns the buffer.
  at::Tensor pixels;
  if (shared) {
    // Read-only shared pages: the dataset only ever reads its pixels.
    void* base = shared->base;
    const size_t length = static_cast<size_t>(shared->size);
    pixels = at::from_blob(static_cast<char*>(base) + image_offset, {n, pixels_per_image},
                           [base, length](void*) { ::munmap(base, length); }, at::TensorOptions().dtype(at::kByte));
  } else {
    char* first = images->data() + image_offset;
    pixels = at::from_blob(first, {n, pixels_per_image}, [images](void*) mutable { images.reset(); },
                           at::TensorOptions().dtype(at::kByte));
    images.reset();
  }

  at::Tensor raw_labels = at::empty({n}, at::kByte);
  std::memcpy(raw_labels.data_ptr<uint8_t>(), labels->data() + label_offset, static_cast<size_t>(n));
  int64_t num_classes = 0;
  at::Tensor target;
  if (kind == TargetKind::kClassIndex) {
    target = raw_labels.to(at::kLong);
    num_classes = target.max().item<int64_t>() + 1;
  } else {
    target = raw_labels.to(at::kFloat);
  }
  MeanStdNormalizer mean_std = normalizer(source, shape);
  return std::make_shared<IdxDataset>("idx " + base_name(source.images), std::move(pixels), std::move(shape),
                                      source.normalize, std::move(mean_std), std::move(target), kind, num_classes);
}

}  // namespace bagua::data
