// Mutations of the shipped recipes through load_recipe() (what `bagua
// validate` and `bagua run` call first): wrong types, deleted, duplicated
// and unknown keys, deep nesting, huge numbers, invalid UTF-8, truncation,
// flipped bytes and YAML alias bombs. Every case must end with a valid
// recipe or a RecipeError whose diagnostics all name the file and a line
// (never a crash, another exception, or a hang: each case is bounded).
//
// Deterministic: the mutations come from a fixed seed, so a failure names
// a case that can be rerun (BAGUA_FUZZ_CASES raises the count locally).
#include "recipe/recipe_test_util.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <random>
#include <thread>

#include <unistd.h>

namespace bagua::testing {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// One mutation of `text`, chosen by `rng`; `kind` says which, for messages.
std::string mutate(const std::string& text, std::mt19937_64& rng, std::string& kind) {
  auto lines = lines_of(text);
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

TEST(RecipeFuzz, MutatedRecipesAreValidOrFailWithFileAndLine) {
  int cases = 2000;
  if (const char* n = std::getenv("BAGUA_FUZZ_CASES")) cases = std::atoi(n);
  const auto sources = yaml_files("recipes");
  ASSERT_FALSE(sources.empty());
  std::mt19937_64 rng(20261123);
  const auto dir = std::filesystem::temp_directory_path() / ("bagua-fuzz-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  int valid = 0, invalid = 0;
  for (int c = 0; c < cases; ++c) {
    const std::string& source = sources[static_cast<size_t>(c) % sources.size()];
    std::string kind;
    std::string text = read_text(source);
    text = mutate(text, rng, kind);
    if (rng() % 3 == 0) {
      std::string second;
      text = mutate(text, rng, second);
      kind += " + " + second;
    }
    // In the recipe's folder's place: relative model paths resolve as in the original.
    const auto path = dir / ("case-" + std::to_string(c) + ".yaml");
    std::ofstream(path, std::ios::binary) << text;
    const std::string what = "case " + std::to_string(c) + " (" + kind + " of " + source + ")";
    // On a thread of its own, so a hang is a failure here, not a stuck suite.
    auto promise = std::make_shared<std::promise<std::string>>();
    std::future<std::string> outcome = promise->get_future();
    std::thread([promise, file = path.string()] {
      try {
        RecipeLoadOptions options;
        options.check_files = false;  // the mutations are about the text
        load_recipe(file, {}, options);
        promise->set_value("valid");
      } catch (const RecipeError& e) {
        std::string verdict = e.diagnostics().empty() ? "a RecipeError with no diagnostics" : "invalid";
        for (const auto& d : e.diagnostics()) {
          if (d.file.empty() || d.line < 1) {
            verdict = "a diagnostic without file and line: " + d.to_string();
            break;
          }
        }
        promise->set_value(verdict);
      } catch (const std::exception& e) {
        promise->set_value(std::string("another exception: ") + e.what());
      }
    }).detach();
    if (outcome.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      FAIL() << what << " did not finish within 10 s\n--- text ---\n" << text.substr(0, 2000);
    }
    const std::string result = outcome.get();
    if (result == "valid") {
      ++valid;
    } else if (result == "invalid") {
      ++invalid;
    } else {
      ADD_FAILURE() << what << ": " << result << "\n--- text ---\n" << text.substr(0, 2000);
    }
    std::filesystem::remove(path);
  }
  std::filesystem::remove_all(dir);
  // The mutations must mostly break recipes, or they test nothing.
  EXPECT_GT(invalid, cases / 2) << valid << " valid, " << invalid << " invalid";
}

}  // namespace
}  // namespace bagua::testing
