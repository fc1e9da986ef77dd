// The recipe mutations shared by the fuzz tests (tests/recipe/fuzz_test.cpp
// in-process, tests/recipe/validate_binary_fuzz_test.cpp through the real
// `bagua validate`): wrong types, deleted, duplicated and unknown keys, deep
// nesting, huge numbers, invalid UTF-8, truncation, flipped bytes, YAML
// alias bombs, odd indentation and shapes. Deterministic for a given
// generator state, so a failing case can be rerun from its number.
#pragma once

#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace bagua::testing {

namespace mutation_detail {
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}
}  // namespace mutation_detail

// One mutation of `text`, chosen by `rng`; `kind` says which, for messages.
inline std::string mutate(const std::string& text, std::mt19937_64& rng, std::string& kind) {
  using mutation_detail::join;
  auto lines = mutation_detail::lines_of(text);
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  static const std::vector<std::string> kValues = {
      "null", "true", "-1", "0", "1e308", "-1e308", "99999999999999999999999999", "0.5", "\"\"", "[]", "{}",
      "[1, [2, [3]]]", "{a: {b: {c: 1}}}", "nan", ".inf", "\"\\xff\"", "'${UNSET_VARIABLE_X}'", "~", "*undefined",
      "&a [*a]", "!!binary aGVsbG8=", "2026-11-23", "0x7fffffffffffffff", "\"a\\u0000b\""};
  switch (rng() % 12) {
    case 0: {  // replace a value after a colon
      kind = "value";
      size_t i = pick(lines.size());
      if (!lines.empty()) {
        auto colon = lines[i].find(": ");
        std::string v = kValues[pick(kValues.size())];
        lines[i] = colon == std::string::npos ? lines[i] + " " + v : lines[i].substr(0, colon + 2) + v;
      }
      return join(lines);
    }
    case 1:  // delete a line
      kind = "delete";
      if (!lines.empty()) lines.erase(lines.begin() + static_cast<long>(pick(lines.size())));
      return join(lines);
    case 2: {  // duplicate a line (duplicate keys)
      kind = "duplicate";
      if (!lines.empty()) {
        size_t i = pick(lines.size());
        lines.insert(lines.begin() + static_cast<long>(i), lines[i]);
      }
      return join(lines);
    }
    case 3: {  // an unknown key at some indentation
      kind = "unknown key";
      size_t i = pick(lines.size() + 1);
      std::string indent(2 * (rng() % 3), ' ');
      lines.insert(lines.begin() + static_cast<long>(i), indent + "no_such_key_" + std::to_string(rng() % 100) + ": 1");
      return join(lines);
    }
    case 4: {  // deep nesting
      kind = "deep nesting";
      const int depth = 200 + static_cast<int>(rng() % 3000);
      std::string deep(static_cast<size_t>(depth), '[');
      deep += std::string(static_cast<size_t>(depth), ']');
      lines.push_back("train: " + deep);
      return join(lines);
    }
    case 5: {  // truncation
      kind = "truncate";
      return text.substr(0, pick(text.size() + 1));
    }
    case 6: {  // flipped bytes
      kind = "bit flip";
      std::string out = text;
      for (int k = 0; k < 1 + static_cast<int>(rng() % 4) && !out.empty(); ++k) {
        out[pick(out.size())] ^= static_cast<char>(1 << (rng() % 8));
      }
      return out;
    }
    case 7: {  // invalid UTF-8 in a string or a key
      kind = "invalid utf-8";
      std::string out = text;
      out.insert(pick(out.size() + 1), std::string("\xc3\x28\xff\xfe", 1 + rng() % 4));
      return out;
    }
    case 8: {  // a YAML alias bomb (billion laughs)
      kind = "alias bomb";
      std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
      for (int k = 1; k < 10; ++k) {
        std::string prev = "*a" + std::to_string(k - 1);
        bomb += "a" + std::to_string(k) + ": &a" + std::to_string(k) + " [" + prev;
        for (int j = 1; j < 10; ++j) bomb += ", " + prev;
        bomb += "]\n";
      }
      return bomb + text + "extra_bomb: *a9\n";
    }
    case 9: {  // a huge or negative number where an integer goes
      kind = "huge number";
      static const char* keys[] = {"epochs", "batch_size", "every_steps", "nproc_per_node", "keep", "bucket_size"};
      std::string key = keys[pick(6)];
      for (auto& l : lines) {
        auto at = l.find(key + ": ");
        if (at != std::string::npos) {
          l = l.substr(0, at) + key + ": " + (rng() % 2 ? "1e400" : "-9223372036854775809");
          break;
        }
      }
      return join(lines);
    }
    case 10: {  // tabs and odd indentation
      kind = "indentation";
      size_t i = pick(lines.size());
      if (!lines.empty()) lines[i] = (rng() % 2 ? "\t" : "   ") + lines[i];
      return join(lines);
    }
    default: {  // a list where a mapping goes, or the reverse
      kind = "shape";
      size_t i = pick(lines.size());
      if (!lines.empty()) lines[i] = (lines[i].rfind("- ", 0) == 0 ? lines[i].substr(2) : "- " + lines[i]);
      return join(lines);
    }
  }
}

// A recipe's mutation as the fuzz tests make it: one mutation, and a third
// of the time a second on top; `kind` names them, for messages.
inline std::string mutate_recipe(const std::string& text, std::mt19937_64& rng, std::string& kind) {
  std::string out = mutate(text, rng, kind);
  if (rng() % 3 == 0) {
    std::string second;
    out = mutate(out, rng, second);
    kind += " + " + second;
  }
  return out;
}

}  // namespace bagua::testing
