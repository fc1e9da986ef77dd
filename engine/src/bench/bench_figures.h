// Small helpers the bench's summary, verdict, table and chart share: a
// figure read from the summary's JSON, and printf-style formatting.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <string>

namespace bagua::bench {

// A figure, NaN when absent or null (JSON has no NaN: a diverged loss is null).
inline double figure(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

inline std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

}  // namespace bagua::bench
