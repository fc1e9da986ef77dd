#pragma once
// "Did you mean": the nearest of a list of names to a word a user wrote,
// for recipe keys and values (recipe/) and for names found in data files
// (data/: a CSV header's columns).

#include <string>
#include <vector>

namespace bagua {

// The closest of `candidates` to `word` when it is a plausible typo (a few
// edits, or the same letters with separators dropped or changed), else "".
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace bagua
