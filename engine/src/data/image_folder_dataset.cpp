// format: image_folder. ROOT/CLASS/*.{jpg,jpeg,png} as torchvision's
// ImageFolder lists it (bagua/data_files.h), listed at load, each image
// read and decoded when its batch is asked for (data/image_decode.h):
// converted to C channels, resized and centre-cropped to H x W.
//
// load_samples() gives the decoded pixels (uint8 [n, C, H, W]: what the
// dataset cache holds); finish_samples() makes them what the model takes:
// the training augmentations of data.train drawn per sample and epoch
// (random_crop, then random_flip), scaled to 0..1, then normalize.
#include "data/dataset_impl.h"
#include "data/image_decode.h"

#include <bagua/data_files.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>
#include <sstream>

namespace bagua::data {
namespace {

class ImageFolderDataset : public Dataset {
 public:
  ImageFolderDataset(const DataSource& source, const LoadOptions& options, ImageFolderListing listing)
      : root_(source.path),
        geometry_{source.input_shape.at(0), source.input_shape.at(1), source.input_shape.at(2), source.resize},
        listing_(std::move(listing)),
        augment_(options.augment && (source.random_flip || source.crop_padding)),
        seed_(options.augment_seed),
        flip_(source.random_flip),
        crop_padding_(source.crop_padding.value_or(-1)),
        skip_unreadable_(source.skip_unreadable),
        normalizer_(source.mean_std, source.input_shape, source.path, "the image's channels") {
    classes_ = options.class_names.empty() ? listing_.classes : options.class_names;
    if (!options.class_names.empty()) {
      // Relabel by name: label i is classes_[i].
      std::vector<int64_t> to(listing_.classes.size());
      for (size_t c = 0; c < listing_.classes.size(); ++c) {
        auto at = std::find(classes_.begin(), classes_.end(), listing_.classes[c]);
        if (at == classes_.end()) {
          std::string known;
          for (const auto& name : classes_) known += (known.empty() ? "" : ", ") + name;
          throw DataError(source.path + "/" + listing_.classes[c] + ": a class the training data does not have (" +
                          known + "), so the model has no output for it; remove it from this folder or add it "
                          "to the training folder");
        }
        to[c] = at - classes_.begin();
      }
      for (int64_t& label : listing_.labels) label = to[static_cast<size_t>(label)];
    }
    int64_t bytes = 0;
    for (int64_t b : listing_.sizes) bytes += b;
    mean_file_bytes_ = listing_.files.empty() ? 0.0 : static_cast<double>(bytes) / listing_.files.size();
  }

  int64_t size() const override { return static_cast<int64_t>(listing_.files.size()); }
  int64_t num_classes() const override { return static_cast<int64_t>(classes_.size()); }
  std::vector<std::string> class_names() const override { return classes_; }
  int64_t memory_bytes() const override {
    int64_t names = 0;
    for (const auto& f : listing_.files) names += static_cast<int64_t>(f.size()) + 32;
    return names;
  }
  double read_bytes_per_sample() const override { return std::max(1.0, mean_file_bytes_); }
  int64_t skipped_samples() const override { return skipped_.load(); }

  Batch load_samples(const std::vector<int64_t>& indices) const override {
    at::Tensor idx = index_tensor(indices, size());
    const auto n = static_cast<int64_t>(indices.size());
    at::Tensor pixels = at::empty({n, geometry_.channels, geometry_.height, geometry_.width}, at::kByte);
    std::vector<int64_t> labels(indices.size());
    for (int64_t k = 0; k < n; ++k) {
      int64_t i = indices[static_cast<size_t>(k)];
      pixels[k].copy_(decode_or_skip(i));
      labels[static_cast<size_t>(k)] = listing_.labels[static_cast<size_t>(i)];
    }
    (void)idx;
    return {pixels, at::tensor(at::ArrayRef<int64_t>(labels), at::kLong)};
  }

  void finish_samples(Batch& batch, const std::vector<int64_t>& indices, int64_t epoch) const override {
    at::Tensor x = batch.input.to(at::kFloat).div_(255.0);
    if (augment_ && epoch >= 0) {
      for (int64_t k = 0; k < x.size(0); ++k) {
        const uint64_t seed = augment_seed(seed_, epoch, indices[static_cast<size_t>(k)]);
        x[k].copy_(augment_image(x[k], seed, flip_, crop_padding_));
      }
    }
    normalizer_.apply(x);
    batch.input = x;
  }

  Batch get_batch(const std::vector<int64_t>& indices) const override {
    Batch b = load_samples(indices);
    finish_samples(b, indices, -1);
    return b;
  }

  std::string describe() const override {
    std::ostringstream s;
    s << "image_folder " << base_name(root_) << ": " << size() << " images in " << listing_.classes.size() << " classes";
    if (classes_.size() != listing_.classes.size()) s << " of the training data's " << classes_.size();
    if (listing_.other_files > 0) s << " (" << listing_.other_files << " other files ignored)";
    s << ", input " << shape_string({geometry_.channels, geometry_.height, geometry_.width}) << " float32"
      << normalizer_.description();
    if (augment_) {
      s << ", augmented (";
      if (crop_padding_ >= 0) s << "random crop, padding " << crop_padding_ << (flip_ ? "; " : "");
      if (flip_) s << "random flip";
      s << ")";
    }
    s << ", " << describe_target(TargetKind::kClassIndex, {}, num_classes());
    return s.str();
  }

 private:
  // Sample i's pixels; with skip_unreadable an unreadable file is replaced
  // by the next readable one (in listing order, wrapping around), so a
  // batch keeps its size.
  at::Tensor decode_or_skip(int64_t i) const {
    const int64_t n = size();
    for (int64_t tried = 0; tried < n; ++tried) {
      const auto at = static_cast<size_t>((i + tried) % n);
      const std::string& file = listing_.files[at];
      try {
        return decode_image(file, geometry_);
      } catch (const ImageError& e) {
        if (!skip_unreadable_)
          throw DataError(file + ": cannot read the image: " + e.what() +
                          " (skip_unreadable: true in the data source skips such files)");
        skipped_.fetch_add(1);
        std::lock_guard<std::mutex> lock(said_mutex_);
        if (said_.insert(file).second)
          std::fprintf(stderr, "data: skipping %s: %s (skip_unreadable; said once per file)\n", file.c_str(),
                       e.what());
      }
    }
    throw DataError(root_ + ": no image in the folder can be read (skip_unreadable skipped them all)");
  }

  std::string root_;
  ImageGeometry geometry_;
  ImageFolderListing listing_;
  bool augment_;
  uint64_t seed_;
  bool flip_;
  int64_t crop_padding_;
  bool skip_unreadable_;
  MeanStdNormalizer normalizer_;
  double mean_file_bytes_ = 0;
  mutable std::atomic<int64_t> skipped_{0};
  std::vector<std::string> classes_;  // label i's name
  mutable std::mutex said_mutex_;
  mutable std::set<std::string> said_;
};

}  // namespace

std::shared_ptr<Dataset> load_image_folder(const DataSource& source, const LoadOptions& options) {
  if (source.input_shape.size() != 3 || (source.input_shape[0] != 1 && source.input_shape[0] != 3))
    throw DataError(source.path + ": image_folder needs input_shape [C, H, W] with C 1 or 3");
  ImageFolderListing listing;
  try {
    listing = list_image_folder(source.path, true);
  } catch (const Error& e) {
    throw DataError(e.what());
  }
  if (listing.classes.empty())
    throw DataError(source.path + ": no class directory (expected ROOT/CLASS/IMAGE.jpg or .png)");
  if (!listing.empty_classes.empty())
    throw DataError(source.path + "/" + listing.empty_classes[0] + ": an empty class directory (no .jpg, .jpeg or "
                    ".png image); every class needs one");
  auto dataset = std::make_shared<ImageFolderDataset>(source, options, listing);
  if (options.complexity_field == "file_size") {
    dataset->set_complexities(std::vector<double>(listing.sizes.begin(), listing.sizes.end()));
  } else if (!options.complexity_field.empty()) {
    throw DataError(source.path + ": complexity_field '" + options.complexity_field +
                    "': an image folder's one per-sample field is file_size");
  }
  return dataset;
}

std::string check_image_folder(const DataSource& source, const LoadOptions& options) {
  auto data = load_image_folder(source, options);
  // The first image decodes: a folder of unreadable files fails here, once,
  // rather than in every worker.
  (void)data->get_batch({0});
  return data->describe();
}

}  // namespace bagua::data
