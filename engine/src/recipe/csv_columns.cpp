// The column specs of a csv data source (target_column, input_columns,
// exclude_columns) and a source's normalize {mean, std}: what can be said of
// them without reading the file. The file's own checks (names against its
// header, indices against its width) are the data loader's.
#include "stages.h"

#include <algorithm>
#include <cctype>

namespace bagua::recipe {

ColumnText classify_column_text(const std::string& text, ColumnRange* range) {
  const bool range_like = text.find('-') != std::string::npos &&
                          std::all_of(text.begin(), text.end(), [](char c) {
                            return std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == ' ';
                          });
  if (!range_like) return ColumnText::kName;
  const size_t dash = text.find('-');
  auto digits = [](std::string s) -> int64_t {
    s.erase(0, s.find_first_not_of(' '));
    s.erase(s.find_last_not_of(' ') + 1);
    const bool ok = !s.empty() && s.size() <= 15 && s.find_first_not_of("0123456789") == std::string::npos;
    return ok ? static_cast<int64_t>(std::stoll(s)) : -1;
  };
  const int64_t first = digits(text.substr(0, dash));
  const int64_t last = digits(text.substr(dash + 1));
  if (first < 0 || last < 0) return ColumnText::kMalformedRange;
  if (range) *range = {first, last};
  return ColumnText::kRange;
}

namespace {

constexpr const char* kRangeForm = "a range \"FIRST-LAST\" of 0-based column indices, both included (e.g. \"1-784\")";

// One column spec of a source, read as the loader will read it.
struct Spec {
  std::string path;        // its key path
  std::string text;        // as written, for messages
  int64_t first = -1;      // an index or a range's first column; -1: a name
  int64_t last = -1;       // a range's last column, an index's own
  std::string name;        // a header name
};

struct CsvSourceChecker {
  SourceTree& tree;
  Diagnostics& diags;
  const std::string& source;
  const json& s;

  void error(const std::string& path, const std::string& message) { diags.add(tree.locate(path), path, message); }

  bool header() const { return !s.contains("header") || s["header"] != false; }

  // The spec at `path`, or nullopt after reporting what is wrong with it.
  std::optional<Spec> spec(const json& v, const std::string& path, const std::string& key) {
    Spec out{path, v.is_string() ? json_quote(v.get<std::string>()) : v.dump(), -1, -1, ""};
    if (v.is_number_integer() && v.get<int64_t>() >= 0) {
      out.first = out.last = v.get<int64_t>();
      return out;
    }
    if (!v.is_string()) return std::nullopt;  // the schema reports the type
    ColumnRange range;
    switch (classify_column_text(v.get<std::string>(), &range)) {
      case ColumnText::kMalformedRange:
        error(path, "expected " + std::string(kRangeForm) + ", found " + out.text);
        return std::nullopt;
      case ColumnText::kRange:
        if (key == "target_column") {
          error(path, "the target is one column: expected a header name or a 0-based index, found the range " +
                          out.text);
          return std::nullopt;
        }
        if (range.first > range.last) {
          error(path, "the range " + out.text + " runs backwards: expected FIRST <= LAST (" + kRangeForm + ")");
          return std::nullopt;
        }
        out.first = range.first;
        out.last = range.last;
        return out;
      case ColumnText::kName:
        if (!header()) {
          error(path, key + " names the column " + out.text + ", but header is false: give a 0-based index" +
                          (key == "target_column" ? "" : " or a range \"FIRST-LAST\""));
          return std::nullopt;
        }
        out.name = v.get<std::string>();
        return out;
    }
    return std::nullopt;
  }

  // input_columns or exclude_columns: one spec or a list of them.
  std::vector<Spec> specs(const std::string& key) {
    std::vector<Spec> out;
    const std::string path = source + "." + key;
    const json& v = s.value(key, json());
    if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i)
        if (auto one = spec(v[i], index_path(path, i), key)) out.push_back(*one);
    } else if (!v.is_null()) {
      if (auto one = spec(v, path, key)) out.push_back(*one);
    }
    return out;
  }

  // No input column twice, and not the target.
  void check_inputs(const std::vector<Spec>& inputs, const std::optional<Spec>& target) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Spec& a = inputs[i];
      if (target && ((!a.name.empty() && a.name == target->name) ||
                     (a.first >= 0 && target->first >= a.first && target->first <= a.last))) {
        error(a.path, "the target column cannot also be an input (found " + target->text + " in both" +
                          (a.last > a.first ? ": start the range after it, or leave it out with exclude_columns)"
                                            : ")"));
        continue;
      }
      for (size_t j = 0; j < i; ++j) {
        const Spec& b = inputs[j];
        const bool same_name = !a.name.empty() && a.name == b.name;
        const bool overlap = a.first >= 0 && b.first >= 0 && a.first <= b.last && b.first <= a.last;
        if (same_name || overlap) {
          error(a.path, "column " + (same_name ? a.text : std::to_string(std::max(a.first, b.first))) +
                            " is already an input column (" + b.path.substr(source.size() + 1) + ": " + b.text +
                            "); each column can be read once");
          break;
        }
      }
    }
  }

  // The number of input columns when the recipe alone says it.
  std::optional<int64_t> static_width(const std::vector<Spec>& inputs) const {
    const json& written = s.value("input_columns", json());
    if (written.is_null() || inputs.empty() || !s.value("exclude_columns", json()).is_null()) return std::nullopt;
    if (static_cast<size_t>(written.is_array() ? written.size() : 1) != inputs.size()) return std::nullopt;
    int64_t n = 0;
    for (const Spec& spec : inputs) n += spec.last - spec.first + 1;  // a name: -1 - -1 + 1
    return n;
  }

  // mean and std lists: of one length, one value per entry of a sample's
  // first dimension when the recipe says what that is.
  void check_mean_std(std::optional<int64_t> width) {
    const json& n = s.value("normalize", json());
    if (!n.is_object()) return;
    const json& mean = n.value("mean", json());
    const json& sd = n.value("std", json());
    const std::string at = source + ".normalize";
    if (mean.is_array() && sd.is_array() && mean.size() != sd.size()) {
      error(at + ".std", "expected as many values as normalize.mean (" + std::to_string(mean.size()) + "), found " +
                             std::to_string(sd.size()));
      return;
    }
    std::string what = "the input columns";
    int64_t first_dim = width.value_or(-1);
    if (const json& shape = s.value("input_shape", json());
        shape.is_array() && !shape.empty() && shape[0].is_number_integer()) {
      first_dim = shape[0].get<int64_t>();
      what = "input_shape's first dimension";
    }
    if (first_dim < 0) return;
    for (const char* key : {"mean", "std"}) {
      const json& v = n.value(key, json());
      if (v.is_array() && static_cast<int64_t>(v.size()) != first_dim)
        error(at + "." + key, "expected one number, or a list of " + std::to_string(first_dim) + " (" + what +
                                  "), found a list of " + std::to_string(v.size()));
    }
  }

  void run() {
    std::optional<Spec> target;
    if (s.contains("target_column")) target = spec(s["target_column"], source + ".target_column", "target_column");
    const std::vector<Spec> inputs = specs("input_columns");
    specs("exclude_columns");
    check_inputs(inputs, target);
    check_mean_std(static_width(inputs));
  }
};

}  // namespace

void check_data_source_columns(SourceTree& tree, const std::string& source, Diagnostics& diags) {
  const json* s = KeyPath::parse(source).find(tree.doc);
  if (!s || !s->is_object()) return;
  const json& format = s->value("format", json());
  if (format == "csv") {
    CsvSourceChecker{tree, diags, source, *s}.run();
  } else if (format == "idx") {
    // idx has no columns: its normalize lists follow input_shape alone.
    CsvSourceChecker{tree, diags, source, *s}.check_mean_std(std::nullopt);
  }
}

}  // namespace bagua::recipe
