#include "launch/slurm_hostlist.h"

#include <bagua/errors.h>

#include <cctype>

namespace bagua::launch {

namespace {

constexpr size_t kMostNames = 100000;

[[noreturn]] void malformed(const std::string& list, const std::string& why) {
  throw Error("SLURM_JOB_NODELIST '" + list + "' is not a Slurm host list: " + why, true);
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// The numbers of one bracket's contents ("01-03,07"), as text with the
// first bound's zero padding.
std::vector<std::string> expand_bracket(const std::string& inside, const std::string& list) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= inside.size()) {
    const size_t comma = inside.find(',', pos);
    const std::string part = inside.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const size_t dash = part.find('-');
    const std::string lo = part.substr(0, dash), hi = dash == std::string::npos ? lo : part.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi) || lo.size() > 9 || hi.size() > 9) {
      malformed(list, "'[" + inside + "]' holds '" + part + "', not a number or a range such as 01-08");
    }
    const long first = std::stol(lo), last = std::stol(hi);
    if (last < first) malformed(list, "the range " + part + " ends below its start");
    for (long n = first; n <= last; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
      out.push_back(digits);
      if (out.size() > kMostNames) malformed(list, "more than " + std::to_string(kMostNames) + " names");
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

// One item ("rack[1-2]-n[8-9]"): every combination of its bracket groups.
void expand_item(const std::string& item, const std::string& list, std::vector<std::string>& names) {
  std::vector<std::string> partial{""};
  size_t pos = 0;
  while (pos < item.size()) {
    const size_t open = item.find('[', pos);
    const std::string literal = item.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    if (literal.find(']') != std::string::npos) malformed(list, "a ']' without its '[' in '" + item + "'");
    for (auto& p : partial) p += literal;
    if (open == std::string::npos) break;
    const size_t close = item.find(']', open);
    if (close == std::string::npos) malformed(list, "'[' without its ']' in '" + item + "'");
    const std::vector<std::string> numbers = expand_bracket(item.substr(open + 1, close - open - 1), list);
    std::vector<std::string> next;
    for (const auto& p : partial) {
      for (const auto& n : numbers) {
        next.push_back(p + n);
        if (names.size() + next.size() > kMostNames) malformed(list, "more than " + std::to_string(kMostNames) + " names");
      }
    }
    partial.swap(next);
    pos = close + 1;
  }
  for (auto& p : partial) names.push_back(std::move(p));
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(const std::string& list) {
  std::vector<std::string> names;
  size_t pos = 0, depth_start = 0;
  int depth = 0;
  // Items are separated by commas outside brackets.
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') {
      if (depth++ > 0) malformed(list, "a '[' inside another");
      depth_start = i;
    } else if (c == ']') {
      if (--depth < 0) malformed(list, "a ']' without its '['");
    } else if (c == ',' && depth == 0) {
      const std::string item = list.substr(pos, i - pos);
      if (item.empty()) malformed(list, "an empty name (two commas, or one at an end)");
      expand_item(item, list, names);
      pos = i + 1;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      malformed(list, "a space");
    }
  }
  if (depth != 0) malformed(list, "'[' at " + std::to_string(depth_start) + " without its ']'");
  return names;
}

int slurm_default_port(int64_t job_id) { return 20000 + static_cast<int>((job_id % 10000 + 10000) % 10000); }

}  // namespace bagua::launch
