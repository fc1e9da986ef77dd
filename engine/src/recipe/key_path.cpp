// KeyPath (bagua/recipe_key_path.h): parsing, the canonical text, walking a
// JSON tree, and "is under".
#include "source_tree.h"

#include <bagua/errors.h>
#include <bagua/recipe_key_path.h>

#include <algorithm>
#include <limits>

namespace bagua {
namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// `digits` (all digits) as a size_t, or nullopt when it does not fit.
std::optional<size_t> index_value(std::string_view digits) {
  size_t value = 0;
  for (char c : digits) {
    const size_t d = static_cast<size_t>(c - '0');
    if (value > (std::numeric_limits<size_t>::max() - d) / 10) return std::nullopt;
    value = value * 10 + d;
  }
  return value;
}

std::string too_large(std::string_view at) {
  return "list index too large at " + recipe::json_quote(std::string(at));
}

}  // namespace

void KeyPath::push_key(std::string key) {
  text_ = recipe::child_path(text_, key);
  steps_.push_back({std::move(key), 0});
}

void KeyPath::push_index(size_t index) {
  text_ = recipe::index_path(text_, index);
  steps_.push_back({"", index});
}

std::optional<KeyPath> KeyPath::parse(std::string_view text, std::string& error) {
  KeyPath path;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == '[') {
      const size_t close = text.find(']', i);
      const std::string_view digits = close == std::string_view::npos ? "" : text.substr(i + 1, close - i - 1);
      if (!all_digits(digits)) {
        error = "malformed list index at " + recipe::json_quote(std::string(text.substr(i))) + " (expected [N])";
        return std::nullopt;
      }
      const std::optional<size_t> index = index_value(digits);
      if (!index) {
        error = too_large(text.substr(i));
        return std::nullopt;
      }
      path.push_index(*index);
      i = close + 1;
      if (i < text.size() && text[i] == '.') ++i;
      continue;
    }
    const size_t end = text.find_first_of(".[", i);
    const std::string_view part = text.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i);
    if (part.empty()) {
      error = "empty key in path " + recipe::json_quote(std::string(text));
      return std::nullopt;
    }
    if (all_digits(part)) {
      const std::optional<size_t> index = index_value(part);
      if (!index) {
        error = too_large(text.substr(i));
        return std::nullopt;
      }
      path.push_index(*index);
    } else {
      path.push_key(std::string(part));
    }
    if (end == std::string_view::npos) break;
    i = text[end] == '.' ? end + 1 : end;
    if (text[end] == '.' && i == text.size()) {
      error = "path ends with a dot";
      return std::nullopt;
    }
  }
  if (path.is_root()) {
    error = "empty key path";
    return std::nullopt;
  }
  return path;
}

KeyPath KeyPath::parse(std::string_view text) {
  std::string error;
  std::optional<KeyPath> path = parse(text, error);
  if (!path) throw ConfigError("malformed key path " + recipe::json_quote(std::string(text)) + ": " + error);
  return *std::move(path);
}

bool KeyPath::is_same_or_under(std::string_view path, std::string_view ancestor) {
  if (ancestor.empty()) return true;
  if (path.substr(0, ancestor.size()) != ancestor) return false;
  return path.size() == ancestor.size() || path[ancestor.size()] == '.' || path[ancestor.size()] == '[';
}

namespace {

// The child of `node` one step down, or nullptr; const and not alike.
template <typename Json>
Json* step_into(Json* node, const KeyPath::Step& step) {
  if (step.is_index()) {
    if (!node->is_array() || step.index >= node->size()) return nullptr;
    return &(*node)[step.index];
  }
  if (!node->is_object()) return nullptr;
  auto it = node->find(step.key);
  return it == node->end() ? nullptr : &*it;
}

}  // namespace

const nlohmann::json* KeyPath::find(const nlohmann::json& doc) const {
  const nlohmann::json* node = &doc;
  for (const Step& step : steps_)
    if (!(node = step_into(node, step))) return nullptr;
  return node;
}

nlohmann::json* KeyPath::find(nlohmann::json& doc) const {
  nlohmann::json* node = &doc;
  for (const Step& step : steps_)
    if (!(node = step_into(node, step))) return nullptr;
  return node;
}

nlohmann::json* KeyPath::make_parent(nlohmann::json& doc, std::string& error,
                                     const std::function<void(const std::string&)>& made) const {
  if (steps_.empty()) {
    error = "the whole recipe has no parent";
    return nullptr;
  }
  nlohmann::json* node = &doc;
  std::string at;  // the path of `node`
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& step = steps_[i];
    const bool last = i + 1 == steps_.size();
    if (step.is_index()) {
      if (!node->is_array() || step.index >= node->size()) {
        error = (at.empty() ? "the recipe" : at) +
                (node->is_array() ? " has " + std::to_string(node->size()) + " items" : " is not a list");
        return nullptr;
      }
      if (last) break;
      node = &(*node)[step.index];
      at = recipe::index_path(at, step.index);
      continue;
    }
    if (node->is_null()) *node = nlohmann::json::object();
    if (!node->is_object()) {
      error = (at.empty() ? "the recipe" : at) + " is " + recipe::describe_found(*node) + ", not a mapping";
      return nullptr;
    }
    if (last) break;
    at = recipe::child_path(at, step.key);
    nlohmann::json& child = (*node)[step.key];
    if (child.is_null()) {
      child = nlohmann::json::object();
      if (made) made(at);
    }
    node = &child;
  }
  return node;
}

}  // namespace bagua
