// Pieces shared by the dataset formats: file reading, shape checks, and
// TensorDataset (samples already stacked in two tensors), which csv,
// tensors and fixed-length jsonl sources load into.
#pragma once

#include <bagua/data.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bagua::data {

// The last component of a path ("a/b/c.csv" -> "c.csv").
std::string base_name(const std::string& path);

// Every byte of `path`; DataError when it cannot be opened or read.
std::vector<char> read_file(const std::string& path);

// "[1, 28, 28]".
std::string shape_string(at::IntArrayRef shape);

// The shape of one input sample: `requested` when given (its element count
// must equal `elements`, else DataError naming `file`, and saying where the
// elements come from when `elements_from` is given), else [elements].
std::vector<int64_t> sample_shape(const std::vector<int64_t>& requested, int64_t elements,
                                  const std::string& file, const std::string& elements_from = "");

// A source's normalize {mean, std} (MeanStd) for samples of one shape: idx
// applies it per batch after its / 255, csv once at load. A list must hold
// one value per entry of the sample's first dimension, else DataError naming
// `file` and what that dimension is (`first_dim_is`).
class MeanStdNormalizer {
 public:
  MeanStdNormalizer() = default;
  MeanStdNormalizer(const MeanStd& spec, at::IntArrayRef sample_shape, const std::string& file,
                    const std::string& first_dim_is);
  // (x - mean) / std on `batch` [n, ...sample shape], in place; nothing
  // when the source has no {mean, std}.
  void apply(at::Tensor& batch) const;
  // For describe(): ", normalized (x - 0.5) / 0.25"; "" without.
  const std::string& description() const { return description_; }

 private:
  at::Tensor mean_, std_;  // broadcast over a batch; undefined: none
  std::string description_;
};

// `indices` as an int64 tensor; InvalidArgument when one is outside [0, size).
at::Tensor index_tensor(const std::vector<int64_t>& indices, int64_t size);

// "target int64 (10 classes)" or "target float32" / "target [3] float32".
std::string describe_target(TargetKind kind, at::IntArrayRef sample_shape, int64_t num_classes);

// All samples in memory as input [N, ...] and target [N, ...].
class TensorDataset : public Dataset {
 public:
  // `label` is "FORMAT FILE" as describe() starts; input float32 (or int64),
  // target int64 [N] (kClassIndex, values >= 0) or float32 [N, ...].
  TensorDataset(std::string label, at::Tensor input, at::Tensor target, TargetKind kind);

  // Words describe() adds right after the input's shape and dtype
  // (" from columns 1-3").
  void describe_input_as(std::string words) { input_words_ = std::move(words); }

  int64_t size() const override { return input_.size(0); }
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  std::string describe() const override;
  int64_t num_classes() const override { return num_classes_; }
  int64_t memory_bytes() const override { return input_.nbytes() + target_.nbytes(); }

 private:
  std::string label_;
  std::string input_words_;
  at::Tensor input_;
  at::Tensor target_;
  TargetKind kind_;
  int64_t num_classes_ = 0;
};

// At most the first `max_bytes` of `path`, cut after its last '\n' when the
// file is longer (so a text check sees whole lines only).
std::vector<char> read_file_prefix(const std::string& path, size_t max_bytes);

// One loader per format; each returns a fully checked dataset. `limit`
// (text formats) > 0 reads only the records in the file's first `limit`
// bytes: check_dataset()'s cheap look.
std::shared_ptr<Dataset> load_idx(const DataSource& source, TargetKind kind, const SharedData* shared);
std::shared_ptr<Dataset> load_csv(const DataSource& source, TargetKind kind, const LoadOptions& options,
                                  size_t limit = 0);
std::shared_ptr<Dataset> load_jsonl(const DataSource& source, TargetKind kind, const LoadOptions& options,
                                    size_t limit = 0);
std::shared_ptr<Dataset> load_tensors(const DataSource& source, TargetKind kind);
// The streamed formats: tokens' targets are always int64 token ids;
// image_folder's are class indices.
std::shared_ptr<Dataset> load_tokens(const DataSource& source);
std::shared_ptr<Dataset> load_image_folder(const DataSource& source, const LoadOptions& options);
// check_dataset() for an image folder: listed, and its first image decoded.
std::string check_image_folder(const DataSource& source, const LoadOptions& options);

// check_dataset() for IDX files: headers and sizes, streaming the images
// through without keeping them.
// With `share`, the inflated images go into a memfd added to it.
std::string check_idx_files(const DataSource& source, TargetKind kind, SharedData* share);

}  // namespace bagua::data
