// YAML -> JSON with the position of every key and value.
//
// yaml-cpp does the parsing; this file adds what it lacks for recipes:
// positions kept per path, duplicate keys detected (yaml-cpp keeps both
// silently), tabs in indentation and empty files reported in words, and
// scalars typed by the YAML 1.2 core schema (quoted scalars stay strings).
#include "stages.h"

#include <bagua/sha256.h>

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>

namespace bagua::recipe {
namespace {

struct Reader {
  std::string file;
  int line_offset = 0;    // added to yaml-cpp's 0-based line
  int column_offset = 0;  // added to yaml-cpp's 0-based column on the first line
  SourceTree& tree;
  Diagnostics& diags;
  // Values converted so far. YAML aliases may repeat a node any number of
  // times (a "billion laughs" file of 1 KB expands to 10^9 values), and a
  // recipe has a few hundred: past kMaxValues the reader stops with an error.
  static constexpr size_t kMaxValues = 100000;
  static constexpr int kMaxDepth = 64;
  size_t values = 0;
  bool too_big = false;
  int depth = 0;

  SourcePos pos(const YAML::Mark& mark, bool plain = true) const {
    if (mark.line < 0) return {file, 0, 0, plain};
    int col = mark.column + 1 + (mark.line == 0 ? column_offset : 0);
    return {file, mark.line + 1 + line_offset, col, plain};
  }

  json convert(const YAML::Node& node, const std::string& path, const SourcePos& where) {
    if (too_big) return nullptr;
    if (++values > kMaxValues) {
      too_big = true;
      diags.add(where, path, "the recipe expands to more than " + std::to_string(kMaxValues) +
                                 " values (YAML aliases (*name) repeating a large anchor?); recipes are far smaller");
      return nullptr;
    }
    if (depth >= kMaxDepth) {
      too_big = true;
      diags.add(where, path, "values nested more than " + std::to_string(kMaxDepth) + " levels deep");
      return nullptr;
    }
    struct Deeper {
      int& d;
      explicit Deeper(int& depth) : d(depth) { ++d; }
      ~Deeper() { --d; }
    } deeper(depth);
    switch (node.Type()) {
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined:
        tree.values[path] = where;
        return nullptr;
      case YAML::NodeType::Scalar: {
        bool plain = node.Tag() == "?";
        SourcePos p = where;
        p.plain = plain;
        tree.values[path] = p;
        if (plain) return resolve_plain_scalar(node.Scalar());
        if (node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str") return node.Scalar();
        return resolve_plain_scalar(node.Scalar());
      }
      case YAML::NodeType::Sequence: {
        tree.values[path] = where;
        json out = json::array();
        size_t i = 0;
        for (const auto& item : node) {
          std::string child = index_path(path, i++);
          out.push_back(convert(item, child, value_pos(item, where)));
        }
        return out;
      }
      case YAML::NodeType::Map: {
        tree.values[path] = where;
        json out = json::object();
        std::map<std::string, int> first_line;
        for (const auto& entry : node) {
          const YAML::Node& key = entry.first;
          SourcePos key_pos = pos(key.Mark());
          if (!key.IsScalar()) {
            diags.add(key_pos, path, "keys must be plain words, found a " +
                      std::string(key.IsSequence() ? "list" : key.IsMap() ? "mapping" : "null") +
                      " used as a key");
            continue;
          }
          const std::string name = key.Scalar();
          std::string child = child_path(path, name);
          if (auto seen = first_line.find(name); seen != first_line.end()) {
            diags.add(key_pos, child, "duplicate key " + json_quote(name) + " (first written at line " +
                      std::to_string(seen->second) + "; YAML keeps only one of them)");
            continue;
          }
          first_line[name] = key_pos.line;
          tree.keys[child] = key_pos;
          // An empty value (`key:`) has no mark of its own worth showing.
          SourcePos vpos = value_pos(entry.second, key_pos);
          out[name] = convert(entry.second, child, vpos);
        }
        return out;
      }
    }
    return nullptr;
  }

  // Position of a value; a null with no text gets its key's position.
  SourcePos value_pos(const YAML::Node& node, const SourcePos& fallback) const {
    SourcePos p = pos(node.Mark());
    if (p.line == 0 || (node.IsNull() && (p.line > fallback.line || node.Mark().line < 0)))
      return fallback;
    return p;
  }
};

// Points at tabs used for indentation; YAML forbids them and yaml-cpp's
// message for them ("illegal map value", ...) hides the cause.
bool report_tabs(const std::string& text, const std::string& file, Diagnostics& diags) {
  bool found = false;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    for (size_t i = 0; i < line.size() && (line[i] == ' ' || line[i] == '\t'); ++i) {
      if (line[i] == '\t') {
        diags.add({file, number, static_cast<int>(i) + 1, true}, "",
                  "tab character in indentation (YAML indents with spaces only)");
        found = true;
        break;
      }
    }
  }
  return found;
}

// The offset of the first byte of `s` that is not well-formed UTF-8
// (overlong forms, surrogates and code points past U+10FFFF included), or
// npos. Recipes are text: JSON, and every message quoting a value, needs it.
size_t invalid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return i;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return i;
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (d & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += n + 1;
  }
  return std::string::npos;
}

// Reports the first invalid UTF-8 byte with its line and column.
bool report_invalid_utf8(const std::string& text, const std::string& file, int column_offset, Diagnostics& diags) {
  const size_t bad = invalid_utf8(text);
  if (bad == std::string::npos) return false;
  int line = 1, col = 1;
  for (size_t i = 0; i < bad; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      ++col;
    }
  }
  char byte[8];
  std::snprintf(byte, sizeof(byte), "0x%02X", static_cast<unsigned char>(text[bad]));
  diags.add({file, line, col + (line == 1 ? column_offset : 0), true}, "",
            std::string("invalid UTF-8 (byte ") + byte + "): a recipe is UTF-8 text");
  return true;
}

std::string syntax_hint(const std::string& msg) {
  if (msg.find("illegal map value") != std::string::npos)
    return " (a value that contains \": \" must be quoted, and a key cannot follow a value on the same line)";
  if (msg.find("end of map not found") != std::string::npos ||
      msg.find("end of sequence not found") != std::string::npos)
    return " (check the indentation of this line against the lines above)";
  if (msg.find("flow") != std::string::npos)
    return " (an unclosed [ or {? inside [ ] and { }, quote values that contain , [ ] { } such as ${VAR})";
  if (msg.find("quote") != std::string::npos || msg.find("end of") != std::string::npos)
    return " (an unclosed quote?)";
  return "";
}

SourcePos syntax_error_pos(const YAML::ParserException& e, const std::string& file, int column_offset) {
  return {file, e.mark.line + 1, e.mark.column + 1 + (e.mark.line == 0 ? column_offset : 0), true};
}

std::string syntax_error_text(const YAML::ParserException& e) { return "YAML syntax error: " + e.msg + syntax_hint(e.msg); }

// `text` with each tab of an indentation made `width` spaces.
std::string expand_indent_tabs(const std::string& text, size_t width) {
  std::string out;
  bool indent = true;
  for (char c : text) {
    if (c == '\n') indent = true;
    else if (c != ' ' && c != '\t') indent = false;
    if (c == '\t' && indent) out.append(width, ' ');
    else out += c;
  }
  return out;
}

// After tabs were reported, the syntax errors they do not cause: the text is
// read with each indentation tab as one space and as four; an error both
// readings meet at the same place (an unclosed [ further down, say) is the
// file's own and is said now rather than after the tabs are fixed. An
// error either reading lacks may be the tabs' doing and is left unsaid.
void report_syntax_errors_beside_tabs(const std::string& text, const std::string& file, int column_offset,
                                      Diagnostics& diags) {
  std::optional<std::pair<SourcePos, std::string>> seen;
  for (size_t width : {1, 4}) {
    try {
      (void)YAML::Load(expand_indent_tabs(text, width));
      return;
    } catch (const YAML::ParserException& e) {
      std::pair<SourcePos, std::string> found{syntax_error_pos(e, file, column_offset), syntax_error_text(e)};
      if (seen && (seen->first.line != found.first.line || seen->first.column != found.first.column ||
                   seen->second != found.second))
        return;
      seen = std::move(found);
    } catch (const YAML::Exception&) {
      return;
    }
  }
  diags.add(seen->first, "", seen->second);
}

SourceTree parse(const std::string& text, const std::string& file, int column_offset,
                 Diagnostics& diags, bool whole_file) {
  SourceTree tree;
  if (report_invalid_utf8(text, file, column_offset, diags)) return tree;
  if (whole_file && report_tabs(text, file, diags)) {
    report_syntax_errors_beside_tabs(text, file, column_offset, diags);
    return tree;
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    diags.add(syntax_error_pos(e, file, column_offset), "", syntax_error_text(e));
    return tree;
  } catch (const YAML::Exception& e) {
    diags.add({file, 1, 1, true}, "", std::string("YAML error: ") + e.what());
    return tree;
  }
  Reader reader{file, 0, column_offset, tree, diags};
  SourcePos top{file, 1, 1 + column_offset, true};
  if (whole_file && (root.IsNull() || !root.IsDefined())) {
    diags.add({file, 1, 1, true}, "",
              "the recipe is empty (expected a mapping with at least model, data and optimizers)");
    tree.values[""] = top;
    return tree;
  }
  tree.doc = reader.convert(root, "", reader.value_pos(root, top));
  tree.values[""] = top;
  if (whole_file && !tree.doc.is_object()) {
    diags.add(reader.pos(root.Mark()), "",
              "a recipe must be a mapping of keys to values (model:, data:, ...), found " +
                  describe_found(tree.doc));
  }
  return tree;
}

}  // namespace

json resolve_plain_scalar(const std::string& text) {
  static const std::regex kInt(R"([-+]?[0-9]+)");
  static const std::regex kHex(R"(0x[0-9a-fA-F]+)");
  static const std::regex kOct(R"(0o[0-7]+)");
  static const std::regex kFloat(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") return nullptr;
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  // Every number starts with a digit, a sign or a point; the regexes below
  // are slow (std::regex), and a file of aliases makes up to kMaxValues
  // scalars, so words skip them.
  const char first = text[0];
  if (!((first >= '0' && first <= '9') || first == '-' || first == '+' || first == '.')) return text;
  try {
    if (std::regex_match(text, kInt)) return std::stoll(text);
    if (std::regex_match(text, kHex)) return std::stoll(text.substr(2), nullptr, 16);
    if (std::regex_match(text, kOct)) return std::stoll(text.substr(2), nullptr, 8);
  } catch (const std::out_of_range&) {
    // Too big for int64: a float, or (beyond double too) left as text, which
    // the schema then reports as the wrong type.
  }
  try {
    if (std::regex_match(text, kInt) || std::regex_match(text, kFloat)) return std::stod(text);
  } catch (const std::out_of_range&) {
    return text;
  }
  return text;
}

SourceTree read_yaml_file(const std::string& display_path, Diagnostics& diags, std::string* sha256) {
  std::ifstream in(display_path, std::ios::binary);
  if (!in) {
    diags.add({display_path, 0, 0, true}, "", "cannot open the recipe file (does it exist?)");
    return {};
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (sha256) *sha256 = sha256_hex(text.str());
  return parse(text.str(), display_path, 0, diags, true);
}

SourceTree read_yaml_text(const std::string& text, const std::string& file, int column_offset,
                          Diagnostics& diags) {
  return parse(text, file, column_offset, diags, false);
}

}  // namespace bagua::recipe
