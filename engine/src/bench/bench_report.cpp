#include <bagua/bench.h>

#include "common/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

namespace bagua::bench {

using svg::xml_escape;

namespace {

using json = nlohmann::json;

// A figure, NaN when absent or null (JSON has no NaN: a diverged loss is null).
double num(const json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

// 12.3 MB, 456 kB, 789 B (powers of 1000).
std::string bytes_text(double b) {
  if (b >= 1e9) return fmt("%.2f GB", b / 1e9);
  if (b >= 1e6) return fmt("%.2f MB", b / 1e6);
  if (b >= 1e3) return fmt("%.1f kB", b / 1e3);
  return fmt("%.0f B", b);
}

// The algorithm others are compared with: gradient_allreduce when measured,
// else the first algorithm.
const json* baseline_of(const json& summary) {
  const json* first = nullptr;
  for (const auto& s : summary) {
    if (s["name"] == "local") continue;
    if (s["name"] == "gradient_allreduce") return &s;
    if (first == nullptr) first = &s;
  }
  return first;
}

std::string recommend(const json& summary) {
  const json* base = baseline_of(summary);
  if (base == nullptr) return "no algorithm measured";
  const double base_loss = num(*base, "last_loss");
  const double base_rate = (*base)["samples_per_s"].get<double>();
  // Candidates train as well as the baseline: not diverged, and a final
  // loss at most 5% (plus a little, for losses near zero) above its.
  const json* best = nullptr;
  std::vector<const json*> candidates;
  std::vector<std::string> excluded;
  for (const auto& s : summary) {
    if (s["name"] == "local") continue;
    const double loss = num(s, "last_loss");
    const bool comparable = !s["diverged"].get<bool>() && std::isfinite(loss) &&
                            (&s == base || loss <= base_loss * 1.05 + 1e-3);
    if (!comparable) {
      excluded.push_back(s["name"].get<std::string>() + (s["diverged"].get<bool>() ? " diverged" : " trained worse"));
      continue;
    }
    if (!s["communicated_every_round"].get<bool>()) {
      // async: its averaging interval outlasted a round, so its figures
      // leave out most of what it sends; not a fair comparison.
      excluded.push_back(s["name"].get<std::string>() + " sent nothing in some rounds (use more --steps)");
      continue;
    }
    candidates.push_back(&s);
    if (best == nullptr || s["samples_per_s"].get<double>() > (*best)["samples_per_s"].get<double>()) best = &s;
  }
  std::ostringstream line;
  const std::string base_name = (*base)["name"];
  if (best == nullptr) {
    line << "none: every algorithm diverged or trained worse than " << base_name;
  } else if (best == base) {
    line << base_name << ": the fastest here of the algorithms that train as well";
    const json* next = nullptr;
    for (const json* s : candidates) {
      if (s == base) continue;
      if (next == nullptr || (*s)["samples_per_s"].get<double>() > (*next)["samples_per_s"].get<double>()) next = s;
    }
    if (next != nullptr && base_rate > 0) {
      line << "; next: " << (*next)["name"].get<std::string>() << " at "
           << fmt("%.2fx", (*next)["samples_per_s"].get<double>() / base_rate) << " its samples/s";
    }
  } else {
    const double loss = num(*best, "last_loss");
    const double diff = base_loss != 0 ? (loss - base_loss) / std::fabs(base_loss) : 0;
    line << (*best)["name"].get<std::string>() << ": " << fmt("%.2fx", (*best)["samples_per_s"].get<double>() / base_rate)
         << " the samples/s of " << base_name << " here, loss "
         << (diff <= 0 ? "no higher" : "within " + fmt("%.0f%%", std::ceil(diff * 100)));
  }
  if (!excluded.empty()) {
    line << " (not considered:";
    for (size_t i = 0; i < excluded.size(); ++i) line << (i ? ", " : " ") << excluded[i];
    line << ")";
  }
  return line.str();
}

}  // namespace

json summarize_bench(json raw) {
  json summary = json::array();
  double compute = 0;
  for (const auto& c : raw["contenders"]) {
    if (c["name"] != "local") continue;
    for (const auto& r : c["ranks"]) compute = std::max(compute, r["step_time_median_s"].get<double>());
  }
  for (const auto& c : raw["contenders"]) {
    const auto& ranks = c["ranks"];
    size_t slowest = 0;
    double rate = 0, counted = 0, sent = 0, received = 0, first = 0, last = 0;
    bool any_diverged = false, every_round = true;
    for (size_t r = 0; r < ranks.size(); ++r) {
      if (ranks[r]["step_time_median_s"].get<double>() > ranks[slowest]["step_time_median_s"].get<double>()) {
        slowest = r;
      }
      rate += ranks[r]["samples_per_s"].get<double>();
      counted += ranks[r]["counted_bytes_per_step"].get<double>();
      sent += ranks[r]["wire_bytes_sent_per_step"].get<double>();
      received += ranks[r]["wire_bytes_received_per_step"].get<double>();
      first += num(ranks[r], "first_loss");
      last += num(ranks[r], "last_loss");
      any_diverged = any_diverged || ranks[r].value("diverged", false);
      every_round = every_round && ranks[r].value("rounds_communicated", 0) >= raw.value("rounds", 0);
    }
    const double n = static_cast<double>(std::max<size_t>(1, ranks.size()));
    const double step = ranks.empty() ? 0 : ranks[slowest]["step_time_median_s"].get<double>();
    json s;
    s["name"] = c["name"];
    s["kwargs"] = c["kwargs"];
    if (c.contains("tuned_bucket_bytes")) s["tuned_bucket_bytes"] = c["tuned_bucket_bytes"];
    s["step_time_s"] = step;
    s["step_time_p10_s"] = ranks.empty() ? 0 : ranks[slowest]["step_time_p10_s"].get<double>();
    s["step_time_p90_s"] = ranks.empty() ? 0 : ranks[slowest]["step_time_p90_s"].get<double>();
    s["samples_per_s"] = rate;
    s["compute_s"] = std::min(compute, step);
    s["communication_s"] = std::max(0.0, step - compute);
    s["communication_share"] = step > 0 ? std::max(0.0, step - compute) / step : 0.0;
    s["counted_bytes_per_step"] = counted / n;
    s["wire_bytes_sent_per_step"] = sent / n;
    s["wire_bytes_received_per_step"] = received / n;
    const double lf = first / n, ll = last / n;
    s["first_loss"] = std::isfinite(lf) ? json(lf) : json(nullptr);
    s["last_loss"] = std::isfinite(ll) ? json(ll) : json(nullptr);
    s["communicated_every_round"] = c["name"] == "local" || every_round;
    s["diverged"] = any_diverged || !std::isfinite(ll) || (std::isfinite(lf) && ll > 1.5 * lf);
    summary.push_back(s);
  }
  // The ideal: the step an algorithm would take if compressing, averaging
  // peers and the rest of its extra work were free: the local step plus
  // gradient_allreduce's communication time scaled by the bytes this
  // algorithm counts per step. vs_ideal says how close it came.
  const json* base = nullptr;
  for (const auto& s : summary) {
    if (s["name"] == "gradient_allreduce") base = &s;
  }
  if (base != nullptr && (*base)["counted_bytes_per_step"].get<double>() > 0) {
    const double base_comm = (*base)["communication_s"].get<double>();
    const double base_bytes = (*base)["counted_bytes_per_step"].get<double>();
    for (auto& s : summary) {
      if (s["name"] == "local") continue;
      const double ideal = compute + base_comm * s["counted_bytes_per_step"].get<double>() / base_bytes;
      s["ideal_step_s"] = ideal;
      s["vs_ideal"] = ideal > 0 ? s["step_time_s"].get<double>() / ideal : 0.0;
    }
  }
  raw["summary"] = summary;
  raw["recommendation"] = recommend(summary);
  return raw;
}

std::vector<std::string> wrap_words(const std::string& text, size_t width) {
  std::vector<std::string> lines;
  std::istringstream words(text);
  std::string word, line;
  while (words >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty() || lines.empty()) lines.push_back(line);
  return lines;
}

std::string bench_table(const json& summarized) {
  std::ostringstream out;
  const json* base = baseline_of(summarized["summary"]);
  const double base_rate = base ? (*base)["samples_per_s"].get<double>() : 0;
  char line[512];
  std::snprintf(line, sizeof(line), "%-28s %10s %17s %10s %7s %6s %11s %11s %9s %10s %8s %s\n", "algorithm",
                "step (s)", "p10-p90 (s)", "samples/s", "vs base", "comm", "counted/step", "wire sent", "loss",
                "ideal (s)", "vs ideal", "");
  out << line;
  for (const auto& s : summarized["summary"]) {
    const bool local = s["name"] == "local";
    const std::string name = local ? "local (no communication)" : s["name"].get<std::string>();
    const bool ideal = s.contains("ideal_step_s");
    std::snprintf(line, sizeof(line), "%-28s %10.4f %8.4f-%-8.4f %10.1f %7s %5.0f%% %11s %11s %9.4f %10s %8s %s\n",
                  name.c_str(), s["step_time_s"].get<double>(), s["step_time_p10_s"].get<double>(),
                  s["step_time_p90_s"].get<double>(), s["samples_per_s"].get<double>(),
                  local || base_rate <= 0 ? "" : fmt("%.2fx", s["samples_per_s"].get<double>() / base_rate).c_str(),
                  100 * s["communication_share"].get<double>(),
                  local ? "" : bytes_text(s["counted_bytes_per_step"].get<double>()).c_str(),
                  local ? "" : bytes_text(s["wire_bytes_sent_per_step"].get<double>()).c_str(),
                  num(s, "last_loss"), ideal ? fmt("%.4f", s["ideal_step_s"].get<double>()).c_str() : "",
                  ideal ? fmt("%.2fx", s["vs_ideal"].get<double>()).c_str() : "",
                  s["diverged"].get<bool>() ? "DIVERGED" : "");
    out << line;
  }
  return out.str();
}

std::string bench_svg(const json& summarized) {
  std::vector<const json*> rows;
  double longest = 0;
  for (const auto& s : summarized["summary"]) {
    if (s["name"] == "local") continue;
    rows.push_back(&s);
    longest = std::max(longest, s["step_time_s"].get<double>());
  }
  const int left = 230, bar_max = 480, row_h = 34, top = 70;
  const int width = left + bar_max + 200;
  // The recommendation, wrapped at words to the picture's width (about 7
  // pixels a character at 13 px).
  const std::vector<std::string> advice =
      wrap_words(summarized.value("recommendation", std::string()), static_cast<size_t>((width - 20) / 7));
  const int height = top + static_cast<int>(rows.size()) * row_h + 34 + 18 * static_cast<int>(advice.size());
  const double scale = longest > 0 ? bar_max / longest : 0;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"sans-serif\" font-size=\"13\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::ostringstream title;
  title << "bagua bench: seconds per step, " << summarized.value("world_size", 0) << " workers, "
        << summarized.value("model", std::string()) << ", batch " << summarized.value("batch_size", 0);
  if (summarized.contains("link") && !summarized["link"].is_null()) title << ", link " << summarized["link"].get<std::string>();
  svg << "<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">" << xml_escape(title.str()) << "</text>\n";
  svg << "<rect x=\"10\" y=\"36\" width=\"14\" height=\"14\" fill=\"#4878a8\"/><text x=\"30\" y=\"48\">compute "
         "(the step without communication)</text>\n"
      << "<rect x=\"330\" y=\"36\" width=\"14\" height=\"14\" fill=\"#e8923a\"/><text x=\"350\" y=\"48\">"
         "communication (time added to the step)</text>\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& s = *rows[i];
    const int y = top + static_cast<int>(i) * row_h;
    const double compute = s["compute_s"].get<double>(), comm = s["communication_s"].get<double>();
    const int cw = static_cast<int>(std::lround(compute * scale)), mw = static_cast<int>(std::lround(comm * scale));
    svg << "<text x=\"" << left - 8 << "\" y=\"" << y + 17 << "\" text-anchor=\"end\">"
        << xml_escape(s["name"].get<std::string>()) << "</text>\n"
        << "<rect x=\"" << left << "\" y=\"" << y + 4 << "\" width=\"" << cw << "\" height=\"20\" fill=\"#4878a8\"/>\n"
        << "<rect x=\"" << left + cw << "\" y=\"" << y + 4 << "\" width=\"" << mw
        << "\" height=\"20\" fill=\"#e8923a\"/>\n"
        << "<text x=\"" << left + cw + mw + 6 << "\" y=\"" << y + 18 << "\">"
        << fmt("%.4f s", s["step_time_s"].get<double>()) << ", " << bytes_text(s["counted_bytes_per_step"].get<double>())
        << "/step" << (s["diverged"].get<bool>() ? ", DIVERGED" : "")
        << (s.contains("vs_ideal") && s["name"] != "gradient_allreduce"
                ? fmt(", %.2fx ideal", s["vs_ideal"].get<double>())
                : std::string())
        << "</text>\n";
    if (s.contains("ideal_step_s") && s["name"] != "gradient_allreduce") {
      // The ideal step: a dashed mark across the bar.
      const int x = left + static_cast<int>(std::lround(s["ideal_step_s"].get<double>() * scale));
      svg << "<line x1=\"" << x << "\" y1=\"" << y + 1 << "\" x2=\"" << x << "\" y2=\"" << y + 27
          << "\" stroke=\"black\" stroke-width=\"2\" stroke-dasharray=\"3,2\"/>\n";
    }
  }
  const int advice_top = height - 16 - 18 * (static_cast<int>(advice.size()) - 1);
  for (size_t i = 0; i < advice.size(); ++i) {
    svg << "<text x=\"10\" y=\"" << advice_top + 18 * static_cast<int>(i) << "\">" << xml_escape(advice[i])
        << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace bagua::bench
