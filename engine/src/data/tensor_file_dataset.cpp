// Tensor files written by Python's torch.save({'input': X, 'target': Y})
// (the zip format, the default since PyTorch 1.6), read with LibTorch's
// torch::pickle_load. Inputs become float32; class targets int64.
#include "data/dataset_impl.h"

#include <torch/csrc/jit/serialization/pickle.h>

#include <sstream>

namespace bagua::data {
namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// "a tensor", "a list", ... for an IValue that is not what was expected.
std::string kind_of(const c10::IValue& v) {
  if (v.isTensor()) return "a tensor";
  if (v.isList()) return "a list";
  if (v.isGenericDict()) return "a dict";
  if (v.isTuple()) return "a tuple";
  if (v.isString()) return "a string";
  if (v.isInt() || v.isDouble()) return "a number";
  if (v.isNone()) return "None";
  return std::string("a ") + v.tagKind();
}

std::string key_list(const c10::impl::GenericDict& dict) {
  std::string all;
  for (const auto& entry : dict) {
    std::ostringstream k;
    if (entry.key().isString()) k << "'" << entry.key().toStringRef() << "'";
    else k << entry.key().tagKind();
    all += (all.empty() ? "" : ", ") + k.str();
  }
  return all.empty() ? "none" : all;
}

at::Tensor find_tensor(const c10::impl::GenericDict& dict, const std::string& key,
                       const std::string& path) {
  for (const auto& entry : dict) {
    if (!entry.key().isString() || entry.key().toStringRef() != key) continue;
    const c10::IValue& value = entry.value();
    if (!value.isTensor())
      throw DataError(path + ": '" + key + "' is " + kind_of(value) + ", expected a tensor");
    at::Tensor t = value.toTensor();
    if (t.dim() == 0)
      throw DataError(path + ": '" + key + "' is a 0-dimensional tensor, expected one record per row [N, ...]");
    if (t.is_complex() || !(t.is_floating_point() || at::isIntegralType(t.scalar_type(), true)))
      throw DataError(path + ": '" + key + "' has dtype " + std::string(c10::toString(t.scalar_type())) +
                      ", expected a real number type");
    if (t.layout() != at::kStrided) t = t.to_dense();
    return t;
  }
  throw DataError(path + ": no key '" + key + "' in the saved dict (keys: " + key_list(dict) + ")");
}

}  // namespace

std::shared_ptr<Dataset> load_tensors(const DataSource& source, TargetKind kind) {
  const std::string& path = source.path;
  std::vector<char> bytes = read_file(path);
  // The legacy format (_use_new_zipfile_serialization=False) is a bare
  // pickle stream: protocol 2 opcode 0x80 0x02 where the zip's "PK" would be.
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x80 && bytes[1] == 0x02)
    throw DataError(path + ": a legacy torch.save file (_use_new_zipfile_serialization=False, "
                    "byte offset 0 holds a pickle header, not a zip archive); save it again "
                    "with torch.save's default format");
  c10::IValue saved;
  try {
    saved = torch::jit::pickle_load(bytes);
  } catch (const c10::Error& e) {
    throw DataError(path + ": not a file written by torch.save (the zip format): " +
                    first_line(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw DataError(path + ": not a file written by torch.save (the zip format): " + first_line(e.what()));
  }
  if (!saved.isGenericDict())
    throw DataError(path + ": expected a dict {'" + source.input_key + "': ..., '" +
                    source.target_key + "': ...}, found " + kind_of(saved));
  c10::impl::GenericDict dict = saved.toGenericDict();
  at::Tensor input = find_tensor(dict, source.input_key, path);
  at::Tensor target = find_tensor(dict, source.target_key, path);
  if (input.size(0) != target.size(0))
    throw DataError(path + ": '" + source.input_key + "' has " + std::to_string(input.size(0)) +
                    " records (shape " + shape_string(input.sizes()) + ") but '" + source.target_key +
                    "' has " + std::to_string(target.size(0)) + " (shape " +
                    shape_string(target.sizes()) + "): the first dimensions must match");
  if (input.size(0) == 0) throw DataError(path + ": holds no records (first dimension 0)");

  input = input.to(at::kFloat).contiguous();
  int64_t per_sample = input.numel() / input.size(0);
  std::vector<int64_t> shape = source.input_shape.empty()
                                   ? input.sizes().slice(1).vec()
                                   : sample_shape(source.input_shape, per_sample, path);
  shape.insert(shape.begin(), input.size(0));
  input = input.view(shape);

  if (kind == TargetKind::kClassIndex) {
    if (!at::isIntegralType(target.scalar_type(), /*includeBool=*/false))
      throw DataError(path + ": '" + source.target_key + "' has dtype " +
                      std::string(c10::toString(target.scalar_type())) +
                      ", but the loss needs class indices (an integer tensor)");
    if (target.dim() != 1)
      throw DataError(path + ": '" + source.target_key + "' has shape " + shape_string(target.sizes()) +
                      ", but class indices must be one per record [N]");
    target = target.to(at::kLong).contiguous();
    at::Tensor negative = (target < 0).nonzero();
    if (negative.size(0) > 0) {
      int64_t record = negative[0][0].item<int64_t>();
      throw DataError(path + ": '" + source.target_key + "' record " + std::to_string(record) +
                      " is " + std::to_string(target[record].item<int64_t>()) +
                      ": class indices must be non-negative");
    }
  } else {
    target = target.to(at::kFloat).contiguous();
  }
  return std::make_shared<TensorDataset>("tensors " + base_name(path), input, target, kind);
}

}  // namespace bagua::data
