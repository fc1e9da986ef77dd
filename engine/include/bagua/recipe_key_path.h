// A key path: one value of a recipe named the way users write it,
// "data.train.images", "optimizers[0].lr". The root (the whole recipe) is
// the empty path, text "".
//
// Text: keys separated by dots; a list item is [N] or .N, so
// "optimizers.0.lr" reads as "optimizers[0].lr". A key of digits only is
// always an item's index (no recipe key is a number). to_string() writes
// the one canonical form, keys joined by dots and every index in brackets,
// which is how every path the recipe layer reports (diagnostics,
// provenance, diffs) is written. parse() refuses empty text, empty keys
// ("a..b"), a trailing dot after a key, and an index that is not [digits]
// or does not fit in size_t, with the reason in words. Around brackets it
// is as lenient as --set has always been: "a.[0]", "a[0]b" and "a[0]."
// read as "a[0]", "a[0].b" and "a[0]".
//
// "Is under" compares text: "data.train.images" and "data.train" itself
// are under "data.train", "data.trainer" is not, and everything is under
// the root. The text form works on any text (positions of keys the schema
// rejected, paths read back from a file), parsed or not; compare canonical
// texts (parse first) when the writer may have used ".N" for an index.
// None of this loads LibTorch (libbagua_recipe).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bagua {

class KeyPath {
 public:
  // One step down: a mapping's key, or a list's index (key empty).
  struct Step {
    std::string key;
    size_t index = 0;
    bool is_index() const { return key.empty(); }
    bool operator==(const Step& other) const { return key == other.key && index == other.index; }
  };

  // The root.
  KeyPath() = default;

  // `text` as a path; nullopt with `error` set (what is wrong, in words)
  // when it is malformed or empty.
  static std::optional<KeyPath> parse(std::string_view text, std::string& error);
  // The same, throwing ConfigError ("malformed key path ...: ...").
  static KeyPath parse(std::string_view text);

  const std::vector<Step>& steps() const { return steps_; }
  bool is_root() const { return steps_.empty(); }
  // The canonical text: "a.b[2].c"; "" for the root.
  const std::string& to_string() const { return text_; }

  // True when `path` is `ancestor` or below it, by text (see above).
  static bool is_same_or_under(std::string_view path, std::string_view ancestor);
  bool is_same_or_under(const KeyPath& ancestor) const { return is_same_or_under(text_, ancestor.text_); }
  // Strictly below `ancestor`: under it and not the same path.
  bool is_under(const KeyPath& ancestor) const {
    return steps_.size() > ancestor.steps_.size() && is_same_or_under(ancestor);
  }

  // The value at this path in `doc`, or nullptr when a key is missing, an
  // index is past the end of its list, or a step meets a value that is not
  // a mapping (a key) or a list (an index).
  const nlohmann::json* find(const nlohmann::json& doc) const;
  nlohmann::json* find(nlohmann::json& doc) const;

  // The mapping or list in `doc` that holds this path's value (as
  // --set key.path=value needs), made on the way: a key that is missing or
  // null becomes an empty mapping, and a null where a mapping is expected
  // too; `made`, when given, is told the path of each key it adds. The
  // value itself is neither made nor changed: the caller sets it (the
  // last step's key, or its index, which must exist). nullptr, with
  // `error` ("optimizers has 1 items", "model.torchscript is string
  // \"m.pt\", not a mapping"), when a step meets a list too short or a
  // value of the other kind; the root has no parent.
  nlohmann::json* make_parent(nlohmann::json& doc, std::string& error,
                              const std::function<void(const std::string&)>& made = nullptr) const;

  bool operator==(const KeyPath& other) const { return steps_ == other.steps_; }
  bool operator!=(const KeyPath& other) const { return !(*this == other); }

 private:
  void push_key(std::string key);
  void push_index(size_t index);

  std::vector<Step> steps_;
  std::string text_;
};

}  // namespace bagua
