#include "common/closest_match.h"

#include <algorithm>
#include <cctype>

namespace bagua {
namespace {

// Levenshtein distance, letters compared without case.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      size_t cost = (std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                     std::tolower(static_cast<unsigned char>(b[j - 1]))) ? 0 : 1;
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + cost});
      diag = up;
    }
  }
  return row[b.size()];
}
}  // namespace

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::string::npos;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  // A typo: a few edits, fewer than half the word.
  size_t limit = std::max<size_t>(1, std::min<size_t>(3, (word.size() + 1) / 2));
  if (best_distance <= limit) return best;
  // A word with its separators dropped or changed: "batchsize", "batch-size".
  auto squash = [](const std::string& s) {
    std::string r;
    for (char ch : s)
      if (std::isalnum(static_cast<unsigned char>(ch))) r += static_cast<char>(std::tolower(ch));
    return r;
  };
  for (const auto& c : candidates)
    if (squash(c) == squash(word)) return c;
  return "";
}

}  // namespace bagua
