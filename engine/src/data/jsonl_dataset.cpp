// JSON Lines: one object per line, holding an input list and a target.
//
// When every input list holds only integers the inputs are token sequences
// of any length (SequenceDataset, padded per batch); otherwise they are
// number lists that must all have one length (a TensorDataset). Targets are
// numbers (class ids or floats) or, for float targets, lists of one length.
#include "data/dataset_impl.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>

namespace bagua::data {
namespace {

using nlohmann::json;

const char* type_name(const json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  if (v.is_boolean()) return "a boolean";
  if (v.is_null()) return "null";
  return v.type_name();
}

// Token sequences of varying length, padded per batch.
class SequenceDataset : public Dataset {
 public:
  SequenceDataset(std::string label, std::vector<int64_t> tokens, std::vector<int64_t> offsets,
                  at::Tensor target, TargetKind kind, int64_t pad_value,
                  std::optional<int64_t> max_length, std::vector<EdgeSample> edges)
      : label_(std::move(label)),
        tokens_(std::move(tokens)),
        offsets_(std::move(offsets)),
        target_(std::move(target)),
        kind_(kind),
        pad_value_(pad_value),
        max_length_(max_length),
        edges_(std::move(edges)) {
    if (kind_ == TargetKind::kClassIndex) num_classes_ = target_.max().item<int64_t>() + 1;
  }

  int64_t size() const override { return static_cast<int64_t>(offsets_.size()) - 1; }

  Batch get_batch(const std::vector<int64_t>& indices) const override {
    at::Tensor idx = index_tensor(indices, size());
    int64_t length = 0;
    if (max_length_) {
      length = *max_length_;
    } else {
      for (int64_t i : indices) length = std::max(length, offsets_[i + 1] - offsets_[i]);
    }
    int64_t n = static_cast<int64_t>(indices.size());
    at::Tensor input = at::full({n, length}, pad_value_, at::kLong);
    int64_t* out = input.data_ptr<int64_t>();
    int64_t real = 0;
    for (int64_t row = 0; row < n; ++row) {
      int64_t i = indices[row];
      int64_t count = std::min(length, offsets_[i + 1] - offsets_[i]);
      std::copy_n(tokens_.begin() + offsets_[i], count, out + row * length);
      real += count;
    }
    return {input, target_.index_select(0, idx), n * length - real};
  }

  std::string describe() const override {
    int64_t shortest = std::numeric_limits<int64_t>::max(), longest = 0;
    for (size_t i = 0; i + 1 < offsets_.size(); ++i) {
      shortest = std::min(shortest, offsets_[i + 1] - offsets_[i]);
      longest = std::max(longest, offsets_[i + 1] - offsets_[i]);
    }
    std::ostringstream s;
    s << label_ << ": " << size() << " samples, input int64 sequences (length " << shortest;
    if (longest != shortest) s << ".." << longest;
    s << ", padded with " << pad_value_;
    if (max_length_) s << " to " << *max_length_;
    s << "), " << describe_target(kind_, target_.sizes().slice(1), num_classes_);
    return s.str();
  }

  int64_t num_classes() const override { return num_classes_; }
  int64_t memory_bytes() const override {
    return static_cast<int64_t>((tokens_.size() + offsets_.size()) * sizeof(int64_t)) + target_.nbytes();
  }
  std::vector<EdgeSample> edge_samples() const override { return edges_; }

 private:
  std::string label_;
  std::vector<int64_t> tokens_;
  std::vector<int64_t> offsets_;  // sample i is tokens_[offsets_[i], offsets_[i + 1])
  at::Tensor target_;
  TargetKind kind_;
  int64_t pad_value_;
  std::optional<int64_t> max_length_;
  int64_t num_classes_ = 0;
  std::vector<EdgeSample> edges_;
};

class JsonlReader {
 public:
  JsonlReader(const DataSource& source, TargetKind kind, const LoadOptions& options, size_t limit)
      : source_(source), kind_(kind), options_(options), limit_(limit) {}

  std::shared_ptr<Dataset> load() {
    std::vector<char> bytes = limit_ > 0 ? read_file_prefix(source_.path, limit_) : read_file(source_.path);
    std::string_view text(bytes.data(), bytes.size());
    int number = 0;
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      ++number;
      std::string_view line = text.substr(start, end - start);
      start = end + 1;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      read_record(number, line);
    }
    if (lines_.empty()) fail(number == 0 ? 1 : number, number == 0 ? "no records: the file is empty"
                                                 : "no records: every line is blank");

    bytes = {};
    at::Tensor target = make_target();
    std::string label = "jsonl " + base_name(source_.path);
    if (all_integers_) {
      if (!source_.input_shape.empty())
        throw DataError(source_.path + ": input_shape is set, but '" + source_.input_field +
                        "' holds integer sequences (token ids), which are padded per batch, "
                        "not reshaped");
      std::vector<Dataset::EdgeSample> edges = edge_samples();
      auto dataset = std::make_shared<SequenceDataset>(label, std::move(tokens_), std::move(offsets_), target, kind_,
                                                       source_.pad_value, source_.max_length, std::move(edges));
      if (!options_.complexity_field.empty()) dataset->set_complexities(std::move(complexity_));
      return dataset;
    }
    // Number lists: all of one length.
    int64_t rows = static_cast<int64_t>(lines_.size());
    int64_t width = offsets_[1] - offsets_[0];
    for (int64_t r = 0; r < rows; ++r) {
      int64_t len = offsets_[r + 1] - offsets_[r];
      if (len != width)
        fail(lines_[r], "field '" + source_.input_field + "' has " + std::to_string(len) +
                            " numbers, but line " + std::to_string(lines_[0]) + " has " +
                            std::to_string(width) +
                            " (lists of non-integer numbers must all have one length)");
    }
    at::Tensor input = at::empty({static_cast<int64_t>(numbers_.size())}, at::kFloat);
    std::copy(numbers_.begin(), numbers_.end(), input.data_ptr<float>());
    numbers_ = {};
    std::vector<int64_t> shape = sample_shape(source_.input_shape, width, source_.path);
    shape.insert(shape.begin(), rows);
    auto dataset = std::make_shared<TensorDataset>(label, input.view(shape), target, kind_);
    if (!options_.complexity_field.empty()) dataset->set_complexities(std::move(complexity_));
    return dataset;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw DataError(source_.path + ":" + std::to_string(line) + ": " + what);
  }

  void read_record(int line, std::string_view text) {
    json record;
    try {
      record = json::parse(text.begin(), text.end());
    } catch (const json::parse_error& e) {
      std::string what = e.what();
      auto bracket = what.find("] ");
      if (what.rfind("[json.exception", 0) == 0 && bracket != std::string::npos)
        what = what.substr(bracket + 2);
      fail(line, "malformed JSON: " + what);
    }
    if (!record.is_object()) fail(line, std::string("expected a JSON object, found ") + type_name(record));
    auto input = record.find(source_.input_field);
    if (input == record.end()) fail(line, "missing field '" + source_.input_field + "'");
    auto target = record.find(source_.target_field);
    if (target == record.end()) fail(line, "missing field '" + source_.target_field + "'");

    if (!input->is_array())
      fail(line, "field '" + source_.input_field + "' must be a list of numbers, found " +
                     type_name(*input));
    if (input->empty()) fail(line, "field '" + source_.input_field + "' is an empty list");
    for (size_t i = 0; i < input->size(); ++i) {
      const json& v = (*input)[i];
      if (!v.is_number())
        fail(line, "field '" + source_.input_field + "' element " + std::to_string(i) + " is " +
                       type_name(v) + "; expected a number");
      if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        fail(line, "field '" + source_.input_field + "' element " + std::to_string(i) +
                       " does not fit in int64");
      // One copy of the inputs: integers while every value so far is
      // one, then (from the first non-integer on) float32 numbers.
      if (all_integers_ && !v.is_number_integer()) {
        all_integers_ = false;
        numbers_.reserve(tokens_.size() + input->size());
        for (int64_t token : tokens_) numbers_.push_back(static_cast<float>(static_cast<double>(token)));
        tokens_ = {};
      }
      if (all_integers_) tokens_.push_back(v.get<int64_t>());
      else numbers_.push_back(static_cast<float>(v.get<double>()));
    }
    offsets_.push_back(offsets_.back() + static_cast<int64_t>(input->size()));
    lines_.push_back(line);
    if (!options_.complexity_field.empty()) read_complexity(line, record);
    read_target(line, *target);
  }

  // The records holding the largest and the smallest token id (within
  // max_length, which truncates the rest away) and the longest record.
  std::vector<Dataset::EdgeSample> edge_samples() const {
    const int64_t records = static_cast<int64_t>(lines_.size());
    int64_t largest = -1, smallest = -1, longest = -1;
    int64_t largest_id = 0, smallest_id = 0, longest_length = 0;
    for (int64_t r = 0; r < records; ++r) {
      const int64_t length = offsets_[r + 1] - offsets_[r];
      const int64_t seen = source_.max_length ? std::min(length, *source_.max_length) : length;
      for (int64_t i = offsets_[r]; i < offsets_[r] + seen; ++i) {
        if (largest < 0 || tokens_[i] > largest_id) largest = r, largest_id = tokens_[i];
        if (smallest < 0 || tokens_[i] < smallest_id) smallest = r, smallest_id = tokens_[i];
      }
      if (length > longest_length) longest = r, longest_length = length;
    }
    // One probe per record, saying all it stands for.
    std::vector<Dataset::EdgeSample> edges;
    auto add = [&](int64_t record, const std::string& holds) {
      if (record < 0) return;
      for (auto& edge : edges) {
        if (edge.index == record) {
          edge.holds += " and " + holds;
          return;
        }
      }
      edges.push_back({record, lines_[record], "the data's " + holds});
    };
    add(largest, "largest token id (" + std::to_string(largest_id) + ")");
    add(smallest, "smallest token id (" + std::to_string(smallest_id) + ")");
    if (!source_.max_length) add(longest, "longest sequence (" + std::to_string(longest_length) + " tokens)");
    return edges;
  }

  void read_complexity(int line, const json& record) {
    const std::string& field = options_.complexity_field;
    auto it = record.find(field);
    if (it == record.end()) fail(line, "missing field '" + field + "' (data.sampler.complexity_field)");
    if (it->is_array()) {
      complexity_.push_back(static_cast<double>(it->size()));
    } else if (it->is_number() && std::isfinite(it->get<double>()) && it->get<double>() >= 0) {
      complexity_.push_back(it->get<double>());
    } else {
      fail(line, "field '" + field + "' (data.sampler.complexity_field) must be a number >= 0 or a list, found " +
                     (it->is_number() ? it->dump() : std::string(type_name(*it))));
    }
  }

  void read_target(int line, const json& t) {
    const std::string& field = source_.target_field;
    if (kind_ == TargetKind::kClassIndex) {
      bool ok = t.is_number() && t.get<double>() >= 0 && t.get<double>() == std::floor(t.get<double>()) &&
                t.get<double>() <= 9.0e15;
      if (!ok)
        fail(line, "field '" + field + "' must be a class index (a non-negative integer), found " +
                       (t.is_number() ? t.dump() : std::string(type_name(t))));
      classes_.push_back(t.is_number_integer() ? t.get<int64_t>() : static_cast<int64_t>(t.get<double>()));
      return;
    }
    int64_t width = 0;
    if (t.is_number()) {
      values_.push_back(t.get<double>());
    } else if (t.is_array() && !t.empty()) {
      for (size_t i = 0; i < t.size(); ++i) {
        if (!t[i].is_number())
          fail(line, "field '" + field + "' element " + std::to_string(i) + " is " +
                         type_name(t[i]) + "; expected a number");
        values_.push_back(t[i].get<double>());
      }
      width = static_cast<int64_t>(t.size());
    } else {
      fail(line, "field '" + field + "' must be a number or a non-empty list of numbers, found " +
                     type_name(t));
    }
    if (target_width_ < 0) {
      target_width_ = width;
    } else if (width != target_width_) {
      auto form = [](int64_t w) { return w == 0 ? std::string("a number") : "a list of " + std::to_string(w); };
      fail(line, "field '" + field + "' is " + form(width) + ", but on line " +
                     std::to_string(lines_[0]) + " it is " + form(target_width_));
    }
  }

  at::Tensor make_target() const {
    int64_t rows = static_cast<int64_t>(lines_.size());
    if (kind_ == TargetKind::kClassIndex) return at::tensor(at::ArrayRef<int64_t>(classes_), at::kLong);
    at::Tensor t = at::tensor(at::ArrayRef<double>(values_), at::kFloat);
    return target_width_ == 0 ? t : t.view({rows, target_width_});
  }

  const DataSource& source_;
  TargetKind kind_;
  const LoadOptions& options_;
  size_t limit_;
  std::vector<int> lines_;             // line number of each record
  std::vector<int64_t> tokens_;        // inputs as integers (while all are)
  std::vector<float> numbers_;         // inputs as numbers (once one is not an integer)
  std::vector<double> complexity_;     // options_.complexity_field per record
  std::vector<int64_t> offsets_{0};
  bool all_integers_ = true;
  std::vector<int64_t> classes_;       // kClassIndex targets
  std::vector<double> values_;         // kFloat targets
  int64_t target_width_ = -1;          // 0: a number per record
};

}  // namespace

std::shared_ptr<Dataset> load_jsonl(const DataSource& source, TargetKind kind, const LoadOptions& options,
                                    size_t limit) {
  return JsonlReader(source, kind, options, limit).load();
}

}  // namespace bagua::data
