// load_dataset(), target_kind_for() and the pieces every format shares.
#include "data/dataset_impl.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace bagua {

TargetKind target_kind_for(Loss loss) {
  switch (loss) {
    case Loss::kCrossEntropy:
    case Loss::kNll:
      return TargetKind::kClassIndex;
    case Loss::kMse:
    case Loss::kL1:
    case Loss::kBceWithLogits:
    case Loss::kModel:
      return TargetKind::kFloat;
  }
  return TargetKind::kFloat;
}

namespace {

void refuse_fields(const DataSource& source, const LoadOptions& options) {
  if (options.complexity_field.empty()) return;
  const std::string file = source.format == DataFormat::kIdx      ? source.images
                           : source.format == DataFormat::kTokens ? source.shards.at(0)
                                                                  : source.path;
  throw DataError(file + ": complexity_field '" + options.complexity_field + "' asks for a per-sample field, "
                  "which " + to_string(source.format) +
                  " data does not have (csv columns and jsonl fields do, and image folders' file_size)");
}

// How much of a text file check_dataset() reads.
constexpr size_t kCheckBytes = 1 << 20;

}  // namespace

std::shared_ptr<Dataset> load_dataset(const DataSource& source, TargetKind target_kind, const LoadOptions& options) {
  std::shared_ptr<Dataset> dataset;
  switch (source.format) {
    case DataFormat::kIdx:
      refuse_fields(source, options);
      dataset = data::load_idx(source, target_kind, options.shared);
      break;
    case DataFormat::kCsv:
      dataset = data::load_csv(source, target_kind, options);
      break;
    case DataFormat::kJsonl:
      dataset = data::load_jsonl(source, target_kind, options);
      break;
    case DataFormat::kTensors:
      refuse_fields(source, options);
      dataset = data::load_tensors(source, target_kind);
      break;
    case DataFormat::kTokens:
      refuse_fields(source, options);
      dataset = data::load_tokens(source);
      break;
    case DataFormat::kImageFolder:
      dataset = data::load_image_folder(source, options);
      break;
  }
  if (!dataset) throw Error("load_dataset: unknown data format");
  return dataset;
}

std::string check_dataset(const DataSource& source, TargetKind target_kind, const LoadOptions& options,
                          SharedData* share) {
  switch (source.format) {
    case DataFormat::kIdx:
      refuse_fields(source, options);
      return data::check_idx_files(source, target_kind, share);
    case DataFormat::kCsv:
      return data::load_csv(source, target_kind, options, kCheckBytes)->describe();
    case DataFormat::kJsonl:
      return data::load_jsonl(source, target_kind, options, kCheckBytes)->describe();
    case DataFormat::kTensors:
      // A pickle is only checked by reading it: the one format the check
      // loads whole.
      refuse_fields(source, options);
      return data::load_tensors(source, target_kind)->describe();
    case DataFormat::kTokens: {
      // Mapped, and the first sample read (its ids checked against
      // vocab_size); nothing more is read.
      refuse_fields(source, options);
      auto tokens = data::load_tokens(source);
      (void)tokens->get_batch({0});
      return tokens->describe();
    }
    case DataFormat::kImageFolder:
      return data::check_image_folder(source, options);
  }
  throw Error("check_dataset: unknown data format");
}

// Datasets that do not report their own storage: every sample the size of
// the first, as a batch holds it (an estimate for variable-length samples).
int64_t Dataset::memory_bytes() const {
  if (size() == 0) return 0;
  Batch one = get_batch({0});
  const int64_t per_sample = one.input.nbytes() + (one.target.defined() ? one.target.nbytes() : 0);
  return per_sample * size();
}

namespace data {

std::string base_name(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::vector<char> read_file_prefix(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open: " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  auto size = in.tellg();
  if (size < 0) throw DataError(path + ": cannot read (is it a directory?)");
  const bool whole = static_cast<size_t>(size) <= max_bytes;
  std::vector<char> bytes(whole ? static_cast<size_t>(size) : max_bytes);
  in.seekg(0, std::ios::beg);
  if (!bytes.empty()) in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in) throw DataError(path + ": read error");
  if (!whole) {
    auto last = std::find(bytes.rbegin(), bytes.rend(), '\n');
    bytes.resize(last == bytes.rend() ? 0 : static_cast<size_t>(bytes.rend() - last));
  }
  return bytes;
}

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open: " + std::strerror(errno));
  std::vector<char> bytes;
  in.seekg(0, std::ios::end);
  auto size = in.tellg();
  if (size < 0) throw DataError(path + ": cannot read (is it a directory?)");
  bytes.resize(static_cast<size_t>(size));
  in.seekg(0, std::ios::beg);
  if (!bytes.empty()) in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in) throw DataError(path + ": read error");
  return bytes;
}

std::string shape_string(at::IntArrayRef shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

std::vector<int64_t> sample_shape(const std::vector<int64_t>& requested, int64_t elements,
                                  const std::string& file, const std::string& elements_from) {
  if (requested.empty()) return {elements};
  int64_t product = 1;
  for (int64_t d : requested) {
    if (d < 1) throw DataError(file + ": input_shape " + shape_string(requested) +
                               " has a dimension below 1");
    product *= d;
  }
  if (product != elements)
    throw DataError(file + ": input_shape " + shape_string(requested) + " has " +
                    std::to_string(product) + " elements, but each sample has " +
                    std::to_string(elements) + (elements_from.empty() ? "" : " (" + elements_from + ")"));
  return requested;
}

namespace {

std::string number_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// `values` as a tensor that broadcasts over a batch of samples of `shape`:
// one value, or one per entry of the first dimension.
at::Tensor broadcastable(const std::vector<double>& values, at::IntArrayRef shape) {
  at::Tensor t = at::tensor(at::ArrayRef<double>(values), at::kDouble).to(at::kFloat);
  if (values.size() == 1) return t.reshape({});
  std::vector<int64_t> dims(shape.size(), 1);
  dims[0] = static_cast<int64_t>(values.size());
  return t.view(dims);
}

}  // namespace

MeanStdNormalizer::MeanStdNormalizer(const MeanStd& spec, at::IntArrayRef sample_shape, const std::string& file,
                                     const std::string& first_dim_is) {
  if (spec.empty()) return;
  const int64_t first = sample_shape.empty() ? 1 : sample_shape[0];
  auto check = [&](const char* key, const std::vector<double>& values) {
    if (values.size() != 1 && static_cast<int64_t>(values.size()) != first)
      throw DataError(file + ": normalize " + key + " has " + std::to_string(values.size()) +
                      " values, but a sample's first dimension has " + std::to_string(first) + " (" + first_dim_is +
                      "): give one number, or one per entry of that dimension");
  };
  check("mean", spec.mean);
  check("std", spec.std);
  for (double v : spec.std)
    if (!(v > 0)) throw DataError(file + ": normalize std " + number_text(v) + " is not a number > 0");
  mean_ = broadcastable(spec.mean, sample_shape);
  std_ = broadcastable(spec.std, sample_shape);
  if (spec.mean.size() == 1 && spec.std.size() == 1)
    description_ = ", normalized (x - " + number_text(spec.mean[0]) + ") / " + number_text(spec.std[0]);
  else
    description_ = ", normalized (x - mean) / std over its first dimension";
}

void MeanStdNormalizer::apply(at::Tensor& batch) const {
  if (!mean_.defined()) return;
  batch.sub_(mean_).div_(std_);
}

at::Tensor index_tensor(const std::vector<int64_t>& indices, int64_t size) {
  for (int64_t i : indices)
    if (i < 0 || i >= size)
      throw InvalidArgument("get_batch: index " + std::to_string(i) +
                            " is outside the dataset (size " + std::to_string(size) + ")");
  return at::tensor(at::ArrayRef<int64_t>(indices), at::kLong);
}

std::string describe_target(TargetKind kind, at::IntArrayRef sample_shape, int64_t num_classes) {
  if (kind == TargetKind::kClassIndex)
    return "target int64 (" + std::to_string(num_classes) + " classes)";
  if (sample_shape.empty()) return "target float32";
  return "target " + shape_string(sample_shape) + " float32";
}

TensorDataset::TensorDataset(std::string label, at::Tensor input, at::Tensor target,
                             TargetKind kind)
    : label_(std::move(label)),
      input_(input.contiguous()),
      target_(target.contiguous()),
      kind_(kind) {
  if (kind_ == TargetKind::kClassIndex && target_.numel() > 0)
    num_classes_ = target_.max().item<int64_t>() + 1;
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  at::Tensor idx = index_tensor(indices, size());
  return {input_.index_select(0, idx), target_.index_select(0, idx)};
}

std::string TensorDataset::describe() const {
  std::ostringstream s;
  s << label_ << ": " << size() << " samples, input " << shape_string(input_.sizes().slice(1))
    << " " << (input_.scalar_type() == at::kLong ? "int64" : "float32") << input_words_ << ", "
    << describe_target(kind_, target_.sizes().slice(1), num_classes_);
  return s.str();
}

}  // namespace data
}  // namespace bagua
