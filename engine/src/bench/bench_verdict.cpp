// The verdict of `bagua bench` (bagua/bench.h, bench_verdict()): which
// algorithm to use here, said only when the measured ranges can tell.
#include <bagua/bench.h>

#include "bench/bench_figures.h"

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace bagua::bench {
namespace {

using json = nlohmann::json;

double step(const json& s) { return s["step_time_s"].get<double>(); }
double rate(const json& s) { return s["samples_per_s"].get<double>(); }

// Their p10-p90 step time ranges share a point.
bool overlap(const json& a, const json& b) {
  return a["step_time_p10_s"].get<double>() <= b["step_time_p90_s"].get<double>() &&
         b["step_time_p10_s"].get<double>() <= a["step_time_p90_s"].get<double>();
}

// Why `s` is left out of the comparison with `base`, or "" when it is in.
std::string reason_left_out(const json& s, const json& base) {
  if (s["diverged"].get<bool>()) return "diverged";
  const double loss = figure(s, "last_loss"), base_loss = figure(base, "last_loss");
  if (!std::isfinite(loss) || (&s != &base && !(loss <= base_loss * 1.05 + 1e-3))) return "trained worse";
  // async: its averaging interval outlasted a round, so its figures leave
  // out most of what it sends; not a fair comparison.
  if (!s["communicated_every_round"].get<bool>()) return "sent nothing in some rounds (use more --steps)";
  return "";
}

std::string names(const json& list) {
  std::string out;
  for (size_t i = 0; i < list.size(); ++i) out += (i ? ", " : "") + list[i].get<std::string>();
  return out;
}

// The line for a clear winner: against the baseline, or the baseline
// against the next fastest.
std::string winner_line(const json& best, const json& base, const std::vector<const json*>& candidates) {
  std::ostringstream line;
  const std::string base_name = base["name"];
  const double base_rate = rate(base);
  if (&best == &base) {
    line << base_name << ": the fastest here of the algorithms that train as well, its p10-p90 step time clear of "
         << "the others'";
    const json* next = nullptr;
    for (const json* s : candidates) {
      if (s != &base && (next == nullptr || step(*s) < step(*next))) next = s;
    }
    if (next != nullptr && base_rate > 0) {
      line << "; next: " << (*next)["name"].get<std::string>() << " at " << fmt("%.2fx", rate(*next) / base_rate)
           << " its samples/s";
    }
    return line.str();
  }
  const double loss = figure(best, "last_loss"), base_loss = figure(base, "last_loss");
  const double diff = base_loss != 0 ? (loss - base_loss) / std::fabs(base_loss) : 0;
  line << best["name"].get<std::string>() << ": "
       << (base_rate > 0 ? fmt("%.2fx", rate(best) / base_rate) : std::string("more than")) << " the samples/s of "
       << base_name << " here, loss " << (diff <= 0 ? "no higher" : "within " + fmt("%.0f%%", std::ceil(diff * 100)))
       << ", its p10-p90 step time clear of the others'";
  return line.str();
}

}  // namespace

json bench_verdict(const json& summary) {
  json v = {{"kind", "none"},          {"winner", nullptr},  {"within_noise", json::array()},
            {"baseline", kBaseline},   {"candidates", json::array()}, {"not_considered", json::array()}};
  const json* base = nullptr;
  for (const auto& s : summary) {
    if (s["name"] == kBaseline) base = &s;
  }
  if (base == nullptr) {
    v["recommendation"] = std::string("none: ") + kBaseline + ", the baseline, was not measured";
    return v;
  }
  std::vector<const json*> candidates;
  std::string left_out;
  for (const auto& s : summary) {
    if (s["name"] == "local") continue;
    const std::string why = reason_left_out(s, *base);
    if (why.empty()) {
      candidates.push_back(&s);
      v["candidates"].push_back(s["name"]);
    } else {
      v["not_considered"].push_back({{"name", s["name"]}, {"reason", why}});
      left_out += (left_out.empty() ? " " : ", ") + s["name"].get<std::string>() + " " + why;
    }
  }
  const json* fastest = nullptr;
  for (const json* s : candidates) {
    if (fastest == nullptr || step(*s) < step(*fastest)) fastest = s;
  }
  for (const json* s : candidates) {
    if (s == fastest || overlap(*s, *fastest)) v["within_noise"].push_back((*s)["name"]);
  }
  std::string line;
  if (candidates.empty()) {
    line = std::string("none: every algorithm diverged or trained worse than ") + kBaseline;
  } else if (candidates.size() == 1) {
    v["kind"] = "alone";
    line = (*fastest)["name"].get<std::string>() + (fastest == base ? " (the baseline)" : "") +
           ": no other algorithm to compare it with";
  } else if (v["within_noise"].size() == 1) {
    v["kind"] = "clear";
    v["winner"] = (*fastest)["name"];
    line = winner_line(*fastest, *base, candidates);
  } else {
    v["kind"] = "within_noise";
    line = "within noise: " + names(v["within_noise"]) + " (their p10-p90 step times overlap" +
           (v["within_noise"].size() < candidates.size() ? "; the others are slower" : "") +
           "): no clear winner here; more --steps or --rounds may separate them";
  }
  if (v["kind"] != "within_noise") v["within_noise"] = json::array();
  if (!left_out.empty()) line += " (not considered:" + left_out + ")";
  v["recommendation"] = line;
  return v;
}

}  // namespace bagua::bench
