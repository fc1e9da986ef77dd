// CSV files of numbers: an optional header row of column names, one sample
// per row, one delimiter character, no quoting (header names may be
// double-quoted). Blank lines are skipped; "\r\n" line ends are accepted.
#include "data/csv_columns.h"
#include "data/dataset_impl.h"

#include <charconv>
#include <cmath>
#include <optional>

namespace bagua::data {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool blank(std::string_view s) { return trim(s).empty(); }

std::vector<std::string_view> split(std::string_view line, char delimiter) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  for (;;) {
    size_t end = line.find(delimiter, start);
    if (end == std::string_view::npos) {
      fields.push_back(trim(line.substr(start)));
      return fields;
    }
    fields.push_back(trim(line.substr(start, end - start)));
    start = end + 1;
  }
}

std::optional<double> parse_number(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty() || !std::isfinite(v))
    return std::nullopt;
  return v;
}

struct Line {
  int number;  // 1-based
  std::string_view text;
};

class CsvReader {
 public:
  CsvReader(const DataSource& source, TargetKind kind, const LoadOptions& options, size_t limit)
      : source_(source), kind_(kind), options_(options), limit_(limit) {}

  std::shared_ptr<Dataset> load() {
    std::vector<char> bytes = limit_ > 0 ? read_file_prefix(source_.path, limit_) : read_file(source_.path);
    split_lines(std::string_view(bytes.data(), bytes.size()));
    resolve_columns();
    const int64_t rows = static_cast<int64_t>(lines_.size() - first_data_);
    const int64_t width = static_cast<int64_t>(columns_.inputs.size());
    at::Tensor input = at::empty({rows, width}, at::kFloat);
    at::Tensor targets = at::empty({rows}, kind_ == TargetKind::kClassIndex ? at::kLong : at::kFloat);
    std::vector<double> complexity(columns_.complexity >= 0 ? rows : 0);
    for (int64_t r = 0; r < rows; ++r) read_row(lines_[first_data_ + r], input.data_ptr<float>() + r * width, targets, r,
                                                complexity);
    std::vector<int64_t> shape = sample_shape(source_.input_shape, width, source_.path,
                                              columns_.summary + "; input_columns and exclude_columns choose others");
    MeanStdNormalizer normalizer(source_.mean_std, shape, source_.path,
                                 source_.input_shape.empty() ? columns_.summary : "input_shape " + shape_string(shape));
    shape.insert(shape.begin(), rows);
    at::Tensor samples = input.view(shape);
    normalizer.apply(samples);
    auto dataset = std::make_shared<TensorDataset>("csv " + base_name(source_.path), samples, targets, kind_);
    dataset->describe_input_as(" from columns " + columns_.list + normalizer.description());
    if (columns_.complexity >= 0) dataset->set_complexities(std::move(complexity));
    return dataset;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw DataError(source_.path + ":" + std::to_string(line) + ": " + what);
  }

  // The file's non-blank lines, with their 1-based numbers.
  void split_lines(std::string_view text) {
    int number = 0;
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      ++number;
      std::string_view line = text.substr(start, end - start);
      if (!blank(line)) lines_.push_back({number, line});
      start = end + 1;
    }
    if (lines_.empty()) fail(1, "empty file: no header and no data rows");
  }

  // The header's names (or the first row's width) against the source's
  // column keys.
  void resolve_columns() {
    std::vector<std::string> names;
    if (source_.header) {
      for (std::string_view f : split(lines_[0].text, source_.delimiter)) {
        if (f.size() >= 2 && f.front() == '"' && f.back() == '"') f = f.substr(1, f.size() - 2);
        names.emplace_back(f);
      }
      first_data_ = 1;
      if (lines_.size() == 1) fail(lines_[0].number + 1, "no data rows after the header");
    }
    const int64_t count = static_cast<int64_t>(split(lines_[0].text, source_.delimiter).size());
    columns_ = resolve_csv_columns(source_, options_, std::move(names), count, lines_[0].number);
    used_.assign(static_cast<size_t>(count), false);
    for (int64_t c : columns_.inputs) used_[c] = true;
    used_[columns_.target] = true;
    if (columns_.complexity >= 0) used_[columns_.complexity] = true;
    values_.assign(static_cast<size_t>(count), 0.0);
  }

  // One row into `in` (its input values), targets[r] and complexity[r];
  // the fields of columns not read need not be numbers.
  void read_row(const Line& line, float* in, at::Tensor& targets, int64_t r, std::vector<double>& complexity) {
    std::vector<std::string_view> fields = split(line.text, source_.delimiter);
    if (static_cast<int64_t>(fields.size()) != columns_.count)
      fail(line.number, "expected " + std::to_string(columns_.count) + " fields (as in " +
                            (source_.header ? "the header" : "the first row") + " on line " +
                            std::to_string(lines_[0].number) + "), found " + std::to_string(fields.size()));
    for (size_t c = 0; c < fields.size(); ++c) {
      if (!used_[c]) continue;
      std::optional<double> v = parse_number(fields[c]);
      if (!v) {
        const std::string where = columns_.role(static_cast<int64_t>(c));
        if (fields[c].empty()) fail(line.number, where + " is empty");
        fail(line.number, where + ": '" + std::string(fields[c]) + "' is not a number");
      }
      values_[c] = *v;
    }
    for (size_t i = 0; i < columns_.inputs.size(); ++i) in[i] = static_cast<float>(values_[columns_.inputs[i]]);
    if (columns_.complexity >= 0) {
      complexity[r] = values_[columns_.complexity];
      if (complexity[r] < 0)
        fail(line.number, "complexity_field column " + columns_.name(columns_.complexity) + ": '" +
                              std::string(fields[columns_.complexity]) + "' is negative; expected a number >= 0");
    }
    const double t = values_[columns_.target];
    if (kind_ == TargetKind::kClassIndex) {
      if (t < 0 || t != std::floor(t) || t > 9.0e15)
        fail(line.number, "target column " + columns_.name(columns_.target) + ": '" +
                              std::string(fields[columns_.target]) + "' is not a class index (a non-negative integer)");
      targets.data_ptr<int64_t>()[r] = static_cast<int64_t>(t);
    } else {
      targets.data_ptr<float>()[r] = static_cast<float>(t);
    }
  }

  const DataSource& source_;
  TargetKind kind_;
  const LoadOptions& options_;
  size_t limit_;
  std::vector<Line> lines_;
  size_t first_data_ = 0;
  CsvColumns columns_;
  std::vector<bool> used_;      // per column: parsed (input, target, complexity)
  std::vector<double> values_;  // the row being read
};

}  // namespace

std::shared_ptr<Dataset> load_csv(const DataSource& source, TargetKind kind, const LoadOptions& options,
                                  size_t limit) {
  return CsvReader(source, kind, options, limit).load();
}

}  // namespace bagua::data
