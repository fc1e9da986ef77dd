// ${VAR} and ${VAR:-default} in string values, from the environment.
//
// For CI pipelines and multi-node launches. `$$` writes a literal `$`.
// An unset (or empty) variable with no default is an error at its position.
// An unquoted value that expands to a number, bool or null takes that type,
// so `nproc_per_node: ${NPROC:-2}` is the integer 2.
#include "stages.h"

#include <cstdlib>
#include <set>

namespace bagua::recipe {
namespace {

bool name_char(char c, bool first) {
  return c == '_' || std::isalpha(static_cast<unsigned char>(c)) ||
         (!first && std::isdigit(static_cast<unsigned char>(c)));
}

struct Expander {
  SourceTree& tree;
  const EnvLookup& lookup;
  Diagnostics& diags;
  std::set<std::string> names;

  void report(const std::string& path, size_t offset, const std::string& message) {
    SourcePos p = tree.locate(path);
    if (p.line > 0) p.column += static_cast<int>(offset) + (p.plain ? 0 : 1);
    diags.add(p, path, message);
  }

  // Returns false when the value had an error.
  bool expand(const std::string& text, const std::string& path, std::string& out) {
    out.clear();
    bool ok = true;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] != '$' || i + 1 >= text.size()) {
        out += text[i];
        continue;
      }
      if (text[i + 1] == '$') {
        out += '$';
        ++i;
        continue;
      }
      if (text[i + 1] != '{') {
        out += text[i];
        continue;
      }
      size_t close = text.find('}', i + 2);
      if (close == std::string::npos) {
        report(path, i, "unterminated ${ (expected ${NAME} or ${NAME:-default}; write $$ for a literal $)");
        return false;
      }
      std::string inner = text.substr(i + 2, close - i - 2);
      std::string name = inner;
      std::optional<std::string> fallback;
      if (size_t sep = inner.find(":-"); sep != std::string::npos) {
        name = inner.substr(0, sep);
        fallback = inner.substr(sep + 2);
      }
      bool valid = !name.empty() && name_char(name[0], true);
      for (char c : name) valid = valid && name_char(c, false);
      if (!valid) {
        report(path, i, "bad variable reference ${" + inner +
               "} (expected ${NAME} or ${NAME:-default}, NAME of letters, digits and _)");
        ok = false;
      } else {
        names.insert(name);
        std::optional<std::string> value = lookup(name);
        if (value && !value->empty()) {
          out += *value;
        } else if (fallback) {
          out += *fallback;
        } else {
          report(path, i, "environment variable " + name +
                 " is not set (set it, or give a default: ${" + name + ":-value})");
          ok = false;
        }
      }
      i = close;
    }
    return ok;
  }

  void walk(json& value, const std::string& path) {
    if (value.is_object()) {
      for (auto it = value.begin(); it != value.end(); ++it) walk(*it, child_path(path, it.key()));
    } else if (value.is_array()) {
      for (size_t i = 0; i < value.size(); ++i) walk(value[i], index_path(path, i));
    } else if (value.is_string()) {
      const std::string text = value.get<std::string>();
      if (text.find('$') == std::string::npos) return;
      std::string out;
      if (!expand(text, path, out)) return;
      bool plain = tree.locate(path).plain && tree.written(path);
      if (plain && text.find("${") != std::string::npos) {
        value = resolve_plain_scalar(out);
      } else {
        value = out;
      }
    }
  }
};

}  // namespace

EnvLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

void expand_environment(SourceTree& tree, const EnvLookup& lookup, Diagnostics& diags,
                        std::vector<std::string>* names) {
  Expander expander{tree, lookup, diags, {}};
  expander.walk(tree.doc, "");
  if (names) names->assign(expander.names.begin(), expander.names.end());
}

}  // namespace bagua::recipe
