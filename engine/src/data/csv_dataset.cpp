// CSV files of numbers: an optional header row of column names, one sample
// per row, one delimiter character, no quoting (header names may be
// double-quoted). Blank lines are skipped; "\r\n" line ends are accepted.
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
    std::string_view text(bytes.data(), bytes.size());
    std::vector<Line> lines;
    int number = 0;
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      ++number;
      std::string_view line = text.substr(start, end - start);
      if (!blank(line)) lines.push_back({number, line});
      start = end + 1;
    }
    if (lines.empty()) fail(1, "empty file: no header and no data rows");

    size_t first_data = 0;
    std::vector<std::string> names;
    if (source_.header) {
      for (std::string_view f : split(lines[0].text, source_.delimiter)) {
        if (f.size() >= 2 && f.front() == '"' && f.back() == '"') f = f.substr(1, f.size() - 2);
        names.emplace_back(f);
      }
      first_data = 1;
      if (lines.size() == 1) fail(lines[0].number + 1, "no data rows after the header");
    }
    const Line& shape_line = lines[0];
    columns_ = split(shape_line.text, source_.delimiter).size();
    std::string columns_from = source_.header ? "the header" : "the first row";

    int64_t target = resolve(source_.target_column, names, "target_column", shape_line.number);
    std::vector<int64_t> inputs;
    if (source_.input_columns.empty()) {
      for (int64_t c = 0; c < static_cast<int64_t>(columns_); ++c)
        if (c != target) inputs.push_back(c);
    } else {
      for (const ColumnRef& ref : source_.input_columns) {
        int64_t c = resolve(ref, names, "input_columns", shape_line.number);
        if (c == target)
          fail(shape_line.number, "input_columns includes the target column " + column_name(c, names));
        inputs.push_back(c);
      }
    }
    if (inputs.empty()) fail(shape_line.number, "no input columns: the file has only the target column");
    int64_t complexity_column = -1;
    if (!options_.complexity_field.empty()) {
      ColumnRef ref;
      const std::string& f = options_.complexity_field;
      if (!source_.header && f.find_first_not_of("0123456789") == std::string::npos && f.size() < 10)
        ref.index = std::stoll(f);
      else
        ref.name = f;
      complexity_column = resolve(ref, names, "complexity_field", shape_line.number);
    }

    int64_t rows = static_cast<int64_t>(lines.size() - first_data);
    int64_t width = static_cast<int64_t>(inputs.size());
    at::Tensor input = at::empty({rows, width}, at::kFloat);
    at::Tensor targets = at::empty({rows}, kind_ == TargetKind::kClassIndex ? at::kLong : at::kFloat);
    float* in = input.data_ptr<float>();
    std::vector<double> values(columns_);
    std::vector<double> complexity;
    if (complexity_column >= 0) complexity.resize(rows);
    for (int64_t r = 0; r < rows; ++r) {
      const Line& line = lines[first_data + r];
      std::vector<std::string_view> fields = split(line.text, source_.delimiter);
      if (fields.size() != columns_)
        fail(line.number, "expected " + std::to_string(columns_) + " fields (as in " +
                              columns_from + " on line " + std::to_string(shape_line.number) +
                              "), found " + std::to_string(fields.size()));
      for (size_t c = 0; c < columns_; ++c) {
        std::optional<double> v = parse_number(fields[c]);
        if (!v) {
          std::string where = "column " + column_name(static_cast<int64_t>(c), names);
          if (fields[c].empty()) fail(line.number, where + " is empty");
          fail(line.number, where + ": '" + std::string(fields[c]) + "' is not a number");
        }
        values[c] = *v;
      }
      for (int64_t i = 0; i < width; ++i) in[r * width + i] = static_cast<float>(values[inputs[i]]);
      if (complexity_column >= 0) {
        complexity[r] = values[complexity_column];
        if (complexity[r] < 0)
          fail(line.number, "complexity_field column " + column_name(complexity_column, names) + ": '" +
                                std::string(fields[complexity_column]) + "' is negative; expected a number >= 0");
      }
      double t = values[target];
      if (kind_ == TargetKind::kClassIndex) {
        if (t < 0 || t != std::floor(t) || t > 9.0e15)
          fail(line.number, "target column " + column_name(target, names) + ": '" +
                                std::string(fields[target]) +
                                "' is not a class index (a non-negative integer)");
        targets.data_ptr<int64_t>()[r] = static_cast<int64_t>(t);
      } else {
        targets.data_ptr<float>()[r] = static_cast<float>(t);
      }
    }
    std::vector<int64_t> shape = sample_shape(source_.input_shape, width, source_.path);
    shape.insert(shape.begin(), rows);
    auto dataset = std::make_shared<TensorDataset>("csv " + base_name(source_.path), input.view(shape), targets, kind_);
    if (complexity_column >= 0) dataset->set_complexities(std::move(complexity));
    return dataset;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw DataError(source_.path + ":" + std::to_string(line) + ": " + what);
  }

  std::string column_name(int64_t c, const std::vector<std::string>& names) const {
    if (c < static_cast<int64_t>(names.size()))
      return "'" + names[c] + "' (index " + std::to_string(c) + ")";
    return std::to_string(c);
  }

  int64_t resolve(const ColumnRef& ref, const std::vector<std::string>& names, const char* key,
                  int line) const {
    if (!ref.name.empty()) {
      if (!source_.header)
        fail(line, std::string(key) + " names the column '" + ref.name +
                       "', but header is false: give a 0-based index");
      int64_t found = -1;
      for (size_t i = 0; i < names.size(); ++i) {
        if (names[i] != ref.name) continue;
        if (found >= 0) fail(line, "column '" + ref.name + "' appears twice in the header");
        found = static_cast<int64_t>(i);
      }
      if (found < 0) {
        std::string all;
        for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
        fail(line, std::string(key) + " '" + ref.name + "' is not a column of the header (" +
                       all + ")");
      }
      return found;
    }
    if (ref.index < 0) fail(line, std::string(key) + " is not set");
    if (ref.index >= static_cast<int64_t>(columns_))
      fail(line, std::string(key) + " index " + std::to_string(ref.index) +
                     " is out of range: the file has " + std::to_string(columns_) + " columns");
    return ref.index;
  }

  const DataSource& source_;
  TargetKind kind_;
  const LoadOptions& options_;
  size_t limit_;
  size_t columns_ = 0;
};

}  // namespace

std::shared_ptr<Dataset> load_csv(const DataSource& source, TargetKind kind, const LoadOptions& options,
                                  size_t limit) {
  return CsvReader(source, kind, options, limit).load();
}

}  // namespace bagua::data
