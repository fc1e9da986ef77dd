#include <bagua/bench.h>

#include "bench/bench_figures.h"
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

// 12.3 MB, 456 kB, 789 B (powers of 1000).
std::string bytes_text(double b) {
  if (b >= 1e9) return fmt("%.2f GB", b / 1e9);
  if (b >= 1e6) return fmt("%.2f MB", b / 1e6);
  if (b >= 1e3) return fmt("%.1f kB", b / 1e3);
  return fmt("%.0f B", b);
}

const json* baseline_of(const json& summary) {
  for (const auto& s : summary) {
    if (s["name"] == kBaseline) return &s;
  }
  return nullptr;
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
      first += figure(ranks[r], "first_loss");
      last += figure(ranks[r], "last_loss");
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
  const json* base = baseline_of(summary);
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
  json verdict = bench_verdict(summary);
  verdict["baseline_added"] = raw.value("baseline_added", false);
  raw["recommendation"] = verdict["recommendation"];
  raw["verdict"] = std::move(verdict);
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
                  figure(s, "last_loss"), ideal ? fmt("%.4f", s["ideal_step_s"].get<double>()).c_str() : "",
                  ideal ? fmt("%.2fx", s["vs_ideal"].get<double>()).c_str() : "",
                  s["diverged"].get<bool>() ? "DIVERGED" : "");
    out << line;
  }
  if (summarized.contains("verdict") && summarized["verdict"].value("baseline_added", false)) {
    out << "(" << kBaseline << ": not asked for, measured as the baseline that vs base compares with)\n";
  }
  return out.str();
}

namespace {

// Where the chart's parts go, in pixels: the bars start at `left` and a
// value of `axis_max` seconds ends at `left + bar_max`; the figures start at
// `values_x`, right of every bar, whisker and ideal mark.
struct ChartLayout {
  static constexpr int left = 230, bar_max = 480, row_h = 34, top = 84, char_w = 7;
  std::vector<const json*> rows;
  std::vector<double> ticks;  // the time axis, 0 to axis_max
  double axis_max = 1;
  int values_x = left + bar_max + 14, width = 0, axis_y = 0, height = 0;
  std::vector<std::string> values, advice;

  int x_of(double seconds) const { return left + static_cast<int>(std::lround(seconds / axis_max * bar_max)); }
};

bool draws_ideal(const json& s) { return s.contains("ideal_step_s") && s["name"] != kBaseline; }

// A row's figures, written right of the bars.
std::string value_text(const json& s) {
  return fmt("%.4f s", s["step_time_s"].get<double>()) + ", " + bytes_text(s["counted_bytes_per_step"].get<double>()) +
         "/step" + (s["diverged"].get<bool>() ? ", DIVERGED" : "") +
         (draws_ideal(s) ? fmt(", %.2fx ideal", s["vs_ideal"].get<double>()) : std::string());
}

ChartLayout chart_layout(const json& summarized) {
  ChartLayout l;
  double longest = 0;
  size_t widest = 0;
  for (const auto& s : summarized["summary"]) {
    if (s["name"] == "local") continue;
    l.rows.push_back(&s);
    longest = std::max({longest, s["step_time_s"].get<double>(), s["step_time_p90_s"].get<double>(),
                        draws_ideal(s) ? s["ideal_step_s"].get<double>() : 0.0});
    l.values.push_back(value_text(s));
    widest = std::max(widest, l.values.back().size());
  }
  l.ticks = svg::nice_ticks(0, longest > 0 ? longest : 1, 5);
  l.axis_max = l.ticks.back() > 0 ? l.ticks.back() : 1;
  l.width = std::max(l.values_x + ChartLayout::char_w * static_cast<int>(widest) + 16, 720);
  // The recommendation, wrapped at words to the picture's width (about 7
  // pixels a character at 13 px).
  l.advice = wrap_words(summarized.value("recommendation", std::string()),
                        static_cast<size_t>((l.width - 20) / ChartLayout::char_w));
  l.axis_y = ChartLayout::top + static_cast<int>(l.rows.size()) * ChartLayout::row_h + 6;
  l.height = l.axis_y + 62 + 18 * static_cast<int>(l.advice.size());
  return l;
}

// The title (the recipe's name, else the synthetic model), the set-up, the legend.
void chart_header(std::ostringstream& svg, const json& summarized) {
  const json recipe = summarized.value("recipe_name", json(nullptr));
  const std::string title = recipe.is_string() ? recipe.get<std::string>() : summarized.value("model", std::string());
  std::ostringstream setup;
  setup << "bagua bench: seconds per step, " << summarized.value("world_size", 0) << " workers, batch "
        << summarized.value("batch_size", 0);
  if (const int64_t accum = summarized.value("grad_accum_steps", 1); accum > 1) setup << " x " << accum << " micro-batches";
  if (const json link = summarized.value("link", json(nullptr)); link.is_string()) {
    setup << ", link " << link.get<std::string>();
  }
  if (const json straggler = summarized.value("straggler", json(nullptr)); straggler.is_object()) {
    setup << ", rank " << straggler.value("rank", 0) << " slowed " << fmt("%gx", straggler.value("factor", 1.0));
  }
  svg << "<text class=\"title\" x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">" << xml_escape(title)
      << "</text>\n<text class=\"subtitle\" x=\"10\" y=\"40\" fill=\"#444\">" << xml_escape(setup.str()) << "</text>\n"
      << "<rect x=\"10\" y=\"52\" width=\"14\" height=\"14\" fill=\"#4878a8\"/><text x=\"30\" y=\"64\">compute</text>\n"
      << "<rect x=\"100\" y=\"52\" width=\"14\" height=\"14\" fill=\"#e8923a\"/><text x=\"120\" y=\"64\">"
         "communication</text>\n"
      << "<line x1=\"240\" y1=\"59\" x2=\"262\" y2=\"59\" stroke=\"#222\" stroke-width=\"1.5\"/>"
         "<text x=\"268\" y=\"64\">p10-p90 step time</text>\n"
      << "<line x1=\"400\" y1=\"52\" x2=\"400\" y2=\"66\" stroke=\"black\" stroke-width=\"2\" "
         "stroke-dasharray=\"3,2\"/><text x=\"408\" y=\"64\">ideal step (extra work free)</text>\n";
}

// One algorithm: its name, the bar, the whisker, the ideal mark, the figures.
void chart_row(std::ostringstream& svg, const ChartLayout& l, size_t i) {
  const json& s = *l.rows[i];
  const int y = ChartLayout::top + static_cast<int>(i) * ChartLayout::row_h;
  const double compute = s["compute_s"].get<double>(), comm = s["communication_s"].get<double>();
  const int x0 = ChartLayout::left, x1 = l.x_of(compute), x2 = l.x_of(compute + comm);
  svg << "<text class=\"name\" x=\"" << x0 - 8 << "\" y=\"" << y + 17 << "\" text-anchor=\"end\">"
      << xml_escape(s["name"].get<std::string>()) << "</text>\n"
      << "<rect class=\"compute\" x=\"" << x0 << "\" y=\"" << y + 4 << "\" width=\"" << x1 - x0
      << "\" height=\"20\" fill=\"#4878a8\"/>\n"
      << "<rect class=\"communication\" x=\"" << x1 << "\" y=\"" << y + 4 << "\" width=\"" << x2 - x1
      << "\" height=\"20\" fill=\"#e8923a\"/>\n";
  const int p10 = l.x_of(s["step_time_p10_s"].get<double>()), p90 = l.x_of(s["step_time_p90_s"].get<double>());
  svg << "<path class=\"range\" d=\"M" << p10 << " " << y + 9 << "v10M" << p10 << " " << y + 14 << "H" << p90 << "M"
      << p90 << " " << y + 9 << "v10\" stroke=\"#222\" stroke-width=\"1.5\" fill=\"none\" data-x1=\"" << p10
      << "\" data-x2=\"" << p90 << "\"/>\n";
  if (draws_ideal(s)) {
    const int x = l.x_of(s["ideal_step_s"].get<double>());
    svg << "<line class=\"ideal\" x1=\"" << x << "\" y1=\"" << y + 1 << "\" x2=\"" << x << "\" y2=\"" << y + 27
        << "\" stroke=\"black\" stroke-width=\"2\" stroke-dasharray=\"3,2\"/>\n";
  }
  svg << "<text class=\"value\" x=\"" << l.values_x << "\" y=\"" << y + 18 << "\">" << xml_escape(l.values[i])
      << "</text>\n";
}

// The time axis under the bars: a line, ticks with their seconds, its label.
void chart_axis(std::ostringstream& svg, const ChartLayout& l) {
  const int y = l.axis_y, x0 = ChartLayout::left, x1 = l.x_of(l.axis_max);
  const double spacing = l.ticks.size() > 1 ? l.ticks[1] - l.ticks[0] : l.axis_max;
  svg << "<line class=\"time-axis\" x1=\"" << x0 << "\" y1=\"" << y << "\" x2=\"" << x1 << "\" y2=\"" << y
      << "\" stroke=\"#444\"/>\n";
  for (double t : l.ticks) {
    const int x = l.x_of(t);
    svg << "<line x1=\"" << x << "\" y1=\"" << y << "\" x2=\"" << x << "\" y2=\"" << y + 5 << "\" stroke=\"#444\"/>"
        << "<text class=\"tick\" x=\"" << x << "\" y=\"" << y + 18 << "\" text-anchor=\"middle\">"
        << svg::tick_label(t, spacing) << "</text>\n";
  }
  svg << "<text class=\"axis-label\" x=\"" << (x0 + x1) / 2 << "\" y=\"" << y + 36
      << "\" text-anchor=\"middle\">step time (seconds)</text>\n";
}

}  // namespace

std::string bench_svg(const json& summarized) {
  const ChartLayout l = chart_layout(summarized);
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << l.width << "\" height=\"" << l.height
      << "\" font-family=\"sans-serif\" font-size=\"13\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  chart_header(svg, summarized);
  for (size_t i = 0; i < l.rows.size(); ++i) chart_row(svg, l, i);
  chart_axis(svg, l);
  const int advice_top = l.axis_y + 62;
  for (size_t i = 0; i < l.advice.size(); ++i) {
    svg << "<text class=\"advice\" x=\"10\" y=\"" << advice_top + 18 * static_cast<int>(i) << "\">"
        << xml_escape(l.advice[i]) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace bagua::bench
