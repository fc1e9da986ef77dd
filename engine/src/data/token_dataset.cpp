// format: tokens. Flat files of little-endian token ids (uint16 or uint32,
// nanoGPT's and Megatron's .bin), each memory-mapped read-only at load and
// read window by window in get_batch(): sample i of a file is the
// context + 1 ids from i * stride; input the first context, target the same
// window moved by one. Samples never cross from one file into the next.
//
// Memory: the pages a window touches are dropped from this process's
// mapping once copied (MADV_DONTNEED), so a worker's resident set does not
// grow with the file as an epoch walks through it; the kernel's page cache
// still keeps them for the next reader.
#include "data/dataset_impl.h"

#include <bagua/data_files.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

namespace bagua::data {
namespace {

class TokenDataset : public Dataset {
 public:
  struct Shard {
    std::string path;
    const unsigned char* base = nullptr;  // the mapping
    size_t bytes = 0;
    int64_t samples = 0;
    int64_t first = 0;  // index of its first sample
  };

  TokenDataset(const DataSource& source, std::vector<Shard> shards, int64_t total)
      : width_(source.token_bytes),
        context_(source.context),
        stride_(source.stride > 0 ? source.stride : source.context),
        vocab_(source.vocab_size),
        shards_(std::move(shards)),
        size_(total) {
    page_ = ::sysconf(_SC_PAGESIZE);
    if (page_ <= 0) page_ = 4096;
  }

  ~TokenDataset() override {
    for (auto& s : shards_)
      if (s.base) ::munmap(const_cast<unsigned char*>(s.base), s.bytes);
  }

  int64_t size() const override { return size_; }
  int64_t num_classes() const override { return vocab_.value_or(0); }
  int64_t memory_bytes() const override { return 0; }
  double read_bytes_per_sample() const override { return static_cast<double>((context_ + 1) * width_); }

  Batch get_batch(const std::vector<int64_t>& indices) const override {
    const auto n = static_cast<int64_t>(indices.size());
    at::Tensor window = at::empty({n, context_ + 1}, at::kLong);
    int64_t* out = window.data_ptr<int64_t>();
    for (int64_t k = 0; k < n; ++k) read_window(indices[k], out + k * (context_ + 1));
    return {window.narrow(1, 0, context_).contiguous(), window.narrow(1, 1, context_).contiguous()};
  }

  std::string describe() const override {
    std::ostringstream s;
    int64_t tokens = 0;
    for (const auto& sh : shards_) tokens += static_cast<int64_t>(sh.bytes) / width_;
    s << "tokens " << (shards_.size() == 1 ? base_name(shards_[0].path) : std::to_string(shards_.size()) + " files")
      << ": " << size_ << " samples of " << context_ << " tokens (stride " << stride_ << ", " << tokens
      << (width_ == 2 ? " uint16" : " uint32") << " ids, streamed), input [" << context_ << "] int64, target ["
      << context_ << "] int64 (next token" << (vocab_ ? ", vocabulary " + std::to_string(*vocab_) : std::string())
      << ")";
    return s.str();
  }

 private:
  void read_window(int64_t index, int64_t* out) const {
    if (index < 0 || index >= size_)
      throw InvalidArgument("get_batch: index " + std::to_string(index) + " is outside the dataset (size " +
                            std::to_string(size_) + ")");
    auto it = std::upper_bound(shards_.begin(), shards_.end(), index,
                               [](int64_t i, const Shard& s) { return i < s.first; });
    const Shard& shard = *(it - 1);
    const size_t offset = static_cast<size_t>((index - shard.first) * stride_ * width_);
    const size_t length = static_cast<size_t>((context_ + 1) * width_);
    const unsigned char* p = shard.base + offset;
    const int64_t count = context_ + 1;
    if (width_ == 2) {
      for (int64_t t = 0; t < count; ++t) out[t] = p[2 * t] | (p[2 * t + 1] << 8);
    } else {
      for (int64_t t = 0; t < count; ++t)
        out[t] = static_cast<int64_t>(p[4 * t]) | (static_cast<int64_t>(p[4 * t + 1]) << 8) |
                 (static_cast<int64_t>(p[4 * t + 2]) << 16) | (static_cast<int64_t>(p[4 * t + 3]) << 24);
    }
    // Whole pages only: a page shared with the next window is dropped too,
    // and simply read again from the page cache when needed.
    const auto first_page = reinterpret_cast<uintptr_t>(p) / static_cast<uintptr_t>(page_) * page_;
    const auto end = reinterpret_cast<uintptr_t>(p) + length;
    ::madvise(reinterpret_cast<void*>(first_page), end - first_page, MADV_DONTNEED);
    if (vocab_) {
      for (int64_t t = 0; t < count; ++t) {
        if (out[t] >= *vocab_)
          throw DataError(shard.path + ": token id " + std::to_string(out[t]) + " at byte offset " +
                          std::to_string(offset + static_cast<size_t>(t * width_)) + " is not below vocab_size " +
                          std::to_string(*vocab_) + " (is dtype right? is vocab_size the tokenizer's?)");
      }
    }
  }

  int64_t width_;
  int64_t context_;
  int64_t stride_;
  std::optional<int64_t> vocab_;
  std::vector<Shard> shards_;
  int64_t size_;
  long page_ = 4096;
};

}  // namespace

std::shared_ptr<Dataset> load_tokens(const DataSource& source) {
  const int64_t width = source.token_bytes;
  const int64_t context = source.context;
  const int64_t stride = source.stride > 0 ? source.stride : context;
  if (context < 1) throw DataError("tokens: context must be at least 1");
  std::vector<std::string> unmatched;
  const std::vector<std::string> files = expand_file_patterns(source.shards, &unmatched);
  if (!unmatched.empty()) throw DataError(unmatched[0] + ": no file matches this pattern (any more)");
  std::vector<TokenDataset::Shard> shards;
  int64_t total = 0;
  auto unmap_all = [&] {
    for (auto& s : shards)
      if (s.base) ::munmap(const_cast<unsigned char*>(s.base), s.bytes);
  };
  for (const auto& path : files) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      unmap_all();
      throw DataError(path + ": cannot open: " + std::strerror(err));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      unmap_all();
      throw DataError(path + ": not a regular file");
    }
    const auto bytes = static_cast<size_t>(st.st_size);
    if (bytes % static_cast<size_t>(width) != 0) {
      ::close(fd);
      unmap_all();
      throw DataError(path + ": " + std::to_string(bytes) + " bytes is not a whole number of " +
                      (width == 2 ? "uint16" : "uint32") + " token ids (" + std::to_string(width) +
                      " bytes each): is dtype right?");
    }
    TokenDataset::Shard shard;
    shard.path = path;
    shard.bytes = bytes;
    const int64_t tokens = static_cast<int64_t>(bytes) / width;
    shard.samples = tokens > context ? (tokens - context - 1) / stride + 1 : 0;
    shard.first = total;
    if (bytes > 0) {
      void* base = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
      if (base == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        unmap_all();
        throw DataError(path + ": cannot map: " + std::strerror(err));
      }
      ::madvise(base, bytes, MADV_RANDOM);
      shard.base = static_cast<const unsigned char*>(base);
    }
    ::close(fd);
    total += shard.samples;
    if (shard.samples > 0) {
      shards.push_back(std::move(shard));
    } else if (shard.base) {
      ::munmap(const_cast<unsigned char*>(shard.base), shard.bytes);
    }
  }
  if (total == 0) {
    unmap_all();
    throw DataError((files.empty() ? std::string("tokens") : files[0]) + (files.size() > 1 ? " and the others" : "") +
                    ": no file holds context + 1 = " + std::to_string(context + 1) + " tokens, so there is no sample");
  }
  return std::make_shared<TokenDataset>(source, std::move(shards), total);
}

}  // namespace bagua::data
