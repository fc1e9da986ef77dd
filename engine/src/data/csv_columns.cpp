#include "data/csv_columns.h"

#include "common/closest_match.h"

#include <algorithm>

namespace bagua::data {
namespace {

// How many runs of a column list are written out before "and N more".
constexpr size_t kRunsShown = 6;

class ColumnResolver {
 public:
  ColumnResolver(const DataSource& source, CsvColumns& out, int line) : source_(source), out_(out), line_(line) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw DataError(source_.path + ":" + std::to_string(line_) + ": " + what);
  }

  // The column `ref` names; DataError naming `key` when the file has none.
  int64_t one(const ColumnRef& ref, const std::string& key) const {
    if (!ref.name.empty()) {
      if (out_.names.empty())
        fail(key + " names the column '" + ref.name + "', but header is false: give a 0-based index");
      int64_t found = -1;
      for (size_t i = 0; i < out_.names.size(); ++i) {
        if (out_.names[i] != ref.name) continue;
        if (found >= 0) fail("column '" + ref.name + "' appears twice in the header");
        found = static_cast<int64_t>(i);
      }
      if (found < 0) {
        // A wide header (785 pixel columns) is not written out whole.
        constexpr size_t kNamesShown = 12;
        std::string all;
        for (size_t i = 0; i < out_.names.size() && i < kNamesShown; ++i) all += (i ? ", " : "") + out_.names[i];
        if (out_.names.size() > kNamesShown)
          all += ", and " + std::to_string(out_.names.size() - kNamesShown) + " more";
        const std::string near = closest_match(ref.name, out_.names);
        fail(key + " '" + ref.name + "' is not a column of the header" +
             (near.empty() ? "" : " (did you mean '" + near + "'?)") + ": " + all);
      }
      return found;
    }
    if (ref.index < 0) fail(key + " is not set");
    check_index(ref.index, key + " index " + std::to_string(ref.index));
    return ref.index;
  }

  // Every column of `refs`, ranges expanded, in order.
  std::vector<int64_t> many(const std::vector<ColumnRef>& refs, const std::string& key) const {
    std::vector<int64_t> out;
    for (const ColumnRef& ref : refs) {
      if (ref.last < 0) {
        out.push_back(one(ref, key));
        continue;
      }
      check_index(ref.last, key + " range " + std::to_string(ref.index) + "-" + std::to_string(ref.last));
      for (int64_t c = ref.index; c <= ref.last; ++c) out.push_back(c);
    }
    return out;
  }

  // The column that `field` (data.sampler.complexity_field) names: a header
  // name, or without a header an index; -1 when it is not `required` and
  // the file has no such column.
  int64_t complexity(const std::string& field, bool required) const {
    ColumnRef ref;
    if (out_.names.empty() && field.find_first_not_of("0123456789") == std::string::npos && field.size() < 10)
      ref.index = std::stoll(field);
    else
      ref.name = field;
    if (!required && (ref.name.empty() ? ref.index >= out_.count
                                       : std::find(out_.names.begin(), out_.names.end(), ref.name) ==
                                             out_.names.end()))
      return -1;
    return one(ref, "complexity_field");
  }

 private:
  void check_index(int64_t c, const std::string& what) const {
    if (c >= out_.count)
      fail(what + " is out of range: the file has " + std::to_string(out_.count) + " columns (indices 0-" +
           std::to_string(out_.count - 1) + ")");
  }

  const DataSource& source_;
  CsvColumns& out_;
  int line_;
};

// "1-784 ('p1'..'p784')", "0, 2-3 ('a', 'c'..'d')", runs of consecutive
// columns, the first few of them.
std::string column_list(const std::vector<int64_t>& columns, const std::vector<std::string>& names) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t c : columns) {
    if (!runs.empty() && runs.back().second + 1 == c) runs.back().second = c;
    else runs.emplace_back(c, c);
  }
  std::string indices, labels;
  for (size_t i = 0; i < runs.size() && i < kRunsShown; ++i) {
    const auto [a, b] = runs[i];
    indices += (i ? ", " : "") + std::to_string(a) + (b > a ? "-" + std::to_string(b) : "");
    if (!names.empty()) labels += (i ? ", '" : "'") + names[a] + (b > a ? "'..'" + names[b] : "") + "'";
  }
  const std::string more = runs.size() > kRunsShown ? ", and " + std::to_string(runs.size() - kRunsShown) + " more" : "";
  return indices + more + (names.empty() ? "" : " (" + labels + (more.empty() ? "" : ", ...") + ")");
}

}  // namespace

std::string CsvColumns::name(int64_t c) const {
  if (c < static_cast<int64_t>(names.size())) return "'" + names[c] + "' (index " + std::to_string(c) + ")";
  return std::to_string(c);
}

std::string CsvColumns::role(int64_t c) const {
  if (c == target) return "target column " + name(c);
  if (c == complexity && std::find(inputs.begin(), inputs.end(), c) == inputs.end())
    return "complexity column " + name(c);
  return "input column " + name(c);
}

CsvColumns resolve_csv_columns(const DataSource& source, const LoadOptions& options, std::vector<std::string> names,
                               int64_t count, int line) {
  CsvColumns out;
  out.names = std::move(names);
  out.count = count;
  ColumnResolver r(source, out, line);
  out.target = r.one(source.target_column, "target_column");
  int64_t left_out = -1;  // the sampler's complexity column, not a default input
  if (!options.complexity_field.empty()) {
    out.complexity = left_out = r.complexity(options.complexity_field, true);
  } else if (!options.sampler_column.empty()) {
    left_out = r.complexity(options.sampler_column, false);
  }

  std::string how;
  if (source.input_columns.empty()) {
    for (int64_t c = 0; c < count; ++c)
      if (c != out.target && c != left_out) out.inputs.push_back(c);
    how = "every column but the target " + out.name(out.target);
    if (left_out >= 0 && left_out != out.target) how += " and the complexity column " + out.name(left_out);
  } else {
    out.inputs = r.many(source.input_columns, "input_columns");
    std::vector<bool> seen(static_cast<size_t>(count), false);
    for (int64_t c : out.inputs) {
      if (c == out.target) r.fail("input_columns includes the target column " + out.name(c));
      if (seen[c]) r.fail("input_columns reads column " + out.name(c) + " twice");
      seen[c] = true;
    }
    how = "as input_columns lists them";
  }
  if (!source.exclude_columns.empty()) {
    const std::vector<int64_t> excluded = r.many(source.exclude_columns, "exclude_columns");
    out.inputs.erase(std::remove_if(out.inputs.begin(), out.inputs.end(),
                                    [&](int64_t c) {
                                      return std::find(excluded.begin(), excluded.end(), c) != excluded.end();
                                    }),
                     out.inputs.end());
    how += ", less exclude_columns " + column_list(excluded, out.names);
  }
  if (out.inputs.empty())
    r.fail("no input columns: " + how + " leaves none of the file's " + std::to_string(count) + " columns");
  out.list = column_list(out.inputs, out.names);
  out.summary = "input columns " + out.list + ", " + std::to_string(out.inputs.size()) + " of the file's " +
                std::to_string(count) + " columns: " + how;
  return out;
}

}  // namespace bagua::data
