#include "common/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace bagua::svg {
namespace {

constexpr int kWidth = 820;
constexpr int kLeft = 86, kRight = 24;  // plot area margins inside the panel
constexpr int kPanelHeight = 250, kPlotTop = 34, kPlotBottom = 44;
constexpr int kHeader = 62;

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  bool empty() const { return !(lo <= hi); }
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  // A range with room: a single value gets a span around it.
  Range padded() const {
    Range r = *this;
    if (r.empty()) return {0, 1};
    if (r.hi == r.lo) {
      const double d = r.lo == 0 ? 1 : std::abs(r.lo) * 0.1;
      r.lo -= d;
      r.hi += d;
    }
    return r;
  }
};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int count) {
  if (!(hi > lo) || count < 2) return {lo};
  const double raw = (hi - lo) / (count - 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  const double first = std::floor(lo / step + 1e-9) * step;
  for (double t = first; ticks.empty() || ticks.back() < hi - step * 1e-9; t += step) ticks.push_back(t);
  return ticks;
}

std::string tick_label(double v, double spacing) {
  char buf[32];
  if (std::abs(v) < spacing * 1e-9) v = 0;
  if (std::abs(v) >= 1e4 && spacing >= 1000) {
    std::snprintf(buf, sizeof(buf), "%gk", v / 1000);
  } else {
    const int decimals = spacing >= 1 ? 0 : std::min(8, static_cast<int>(std::ceil(-std::log10(spacing) - 1e-9)));
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  }
  return buf;
}

std::string line_chart_svg(const std::string& title, const std::string& subtitle,
                           const std::vector<ChartPanel>& panels, const std::vector<ChartMarker>& markers) {
  Range xs;
  for (const auto& m : markers) xs.add(m.x);
  for (const auto& p : panels)
    for (const auto& s : p.series)
      for (const auto& pt : s.points) xs.add(pt.first);
  const std::vector<double> x_ticks = nice_ticks(xs.padded().lo, xs.padded().hi, 6);
  const double x_lo = x_ticks.front(), x_hi = x_ticks.size() > 1 ? x_ticks.back() : x_lo + 1;
  const int plot_w = kWidth - kLeft - kRight;
  const int height = kHeader + static_cast<int>(panels.size()) * kPanelHeight + 10;

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << kWidth << " " << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"12\" y=\"24\" font-size=\"16\" font-weight=\"bold\">" << xml_escape(title) << "</text>\n"
      << "<text x=\"12\" y=\"46\" fill=\"#444\">" << xml_escape(subtitle) << "</text>\n";

  for (size_t i = 0; i < panels.size(); ++i) {
    const ChartPanel& panel = panels[i];
    const int top = kHeader + static_cast<int>(i) * kPanelHeight;
    const int plot_top = top + kPlotTop, plot_h = kPanelHeight - kPlotTop - kPlotBottom;
    const int plot_bottom = plot_top + plot_h;
    Range ys;
    size_t points = 0;
    for (const auto& s : panel.series) {
      for (const auto& pt : s.points) ys.add(pt.second);
      points += s.points.size();
    }
    const std::vector<double> y_ticks = nice_ticks(ys.padded().lo, ys.padded().hi, 5);
    const double y_lo = y_ticks.front(), y_hi = y_ticks.size() > 1 ? y_ticks.back() : y_lo + 1;
    auto px = [&](double x) { return kLeft + (x - x_lo) / (x_hi - x_lo) * plot_w; };
    auto py = [&](double y) { return plot_bottom - (y - y_lo) / (y_hi - y_lo) * plot_h; };

    svg << "<g class=\"panel\">\n"
        << "<text x=\"" << kLeft << "\" y=\"" << top + 22 << "\" font-size=\"14\" font-weight=\"bold\">"
        << xml_escape(panel.title) << "</text>\n";
    // Grid and tick labels.
    const double y_spacing = y_ticks.size() > 1 ? y_ticks[1] - y_ticks[0] : 1;
    for (double t : y_ticks) {
      const std::string y = num(py(t));
      svg << "<line x1=\"" << kLeft << "\" y1=\"" << y << "\" x2=\"" << kLeft + plot_w << "\" y2=\"" << y
          << "\" stroke=\"#e4e4e4\"/>\n"
          << "<text class=\"tick\" x=\"" << kLeft - 6 << "\" y=\"" << num(py(t) + 4) << "\" text-anchor=\"end\">"
          << tick_label(t, y_spacing) << "</text>\n";
    }
    const double x_spacing = x_ticks.size() > 1 ? x_ticks[1] - x_ticks[0] : 1;
    for (double t : x_ticks) {
      const std::string x = num(px(t));
      svg << "<line x1=\"" << x << "\" y1=\"" << plot_top << "\" x2=\"" << x << "\" y2=\"" << plot_bottom
          << "\" stroke=\"#e4e4e4\"/>\n"
          << "<text class=\"tick\" x=\"" << x << "\" y=\"" << plot_bottom + 16 << "\" text-anchor=\"middle\">"
          << tick_label(t, x_spacing) << "</text>\n";
    }
    svg << "<rect x=\"" << kLeft << "\" y=\"" << plot_top << "\" width=\"" << plot_w << "\" height=\"" << plot_h
        << "\" fill=\"none\" stroke=\"#888\"/>\n"
        << "<text x=\"" << kLeft + plot_w / 2 << "\" y=\"" << plot_bottom + 34 << "\" text-anchor=\"middle\">step</text>\n"
        << "<text transform=\"translate(18 " << plot_top + plot_h / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
        << xml_escape(panel.y_label) << "</text>\n";
    for (const auto& m : markers) {
      const std::string x = num(px(m.x));
      svg << "<g class=\"x-marker\"><line x1=\"" << x << "\" y1=\"" << plot_top << "\" x2=\"" << x << "\" y2=\""
          << plot_bottom << "\" stroke=\"#777\" stroke-dasharray=\"4 3\"/><text x=\"" << num(px(m.x) + 3) << "\" y=\""
          << plot_top + 12 << "\" fill=\"#555\" font-size=\"11\">" << xml_escape(m.label) << "</text></g>\n";
    }
    if (points == 0) {
      svg << "<text x=\"" << kLeft + plot_w / 2 << "\" y=\"" << plot_top + plot_h / 2
          << "\" text-anchor=\"middle\" fill=\"#888\">" << xml_escape(panel.empty_note) << "</text>\n";
    }
    // Series, with markers when there are few points, and the legend.
    int legend_x = kLeft + plot_w;
    for (auto s = panel.series.rbegin(); s != panel.series.rend(); ++s) {
      legend_x -= 14 + 7 * static_cast<int>(s->label.size()) + 16;
      svg << "<rect x=\"" << legend_x << "\" y=\"" << top + 13 << "\" width=\"12\" height=\"4\" fill=\"" << s->color
          << "\"/><text x=\"" << legend_x + 16 << "\" y=\"" << top + 19 << "\">" << xml_escape(s->label)
          << "</text>\n";
    }
    for (const auto& s : panel.series) {
      std::vector<std::pair<double, double>> drawn;  // a NaN or infinite value has no place on the chart
      for (const auto& pt : s.points) {
        if (std::isfinite(pt.first) && std::isfinite(pt.second)) drawn.push_back(pt);
      }
      if (drawn.empty()) continue;
      svg << "<polyline data-series=\"" << xml_escape(s.id) << "\" data-points=\"" << drawn.size()
          << "\" fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"2\" stroke-linejoin=\"round\" points=\"";
      for (size_t k = 0; k < drawn.size(); ++k) {
        svg << (k ? " " : "") << num(px(drawn[k].first)) << "," << num(py(drawn[k].second));
      }
      svg << "\"/>\n";
      if (drawn.size() <= 60) {
        for (const auto& pt : drawn) {
          svg << "<circle cx=\"" << num(px(pt.first)) << "\" cy=\"" << num(py(pt.second)) << "\" r=\"3\" fill=\""
              << s.color << "\"/>\n";
        }
      }
      for (const auto& h : s.highlights) {
        if (!std::isfinite(h.x) || !std::isfinite(h.y)) continue;
        const double label_y = py(h.y) < plot_top + 20 ? py(h.y) + 18 : py(h.y) - 9;  // inside the plot
        svg << "<g class=\"highlight\" data-series=\"" << xml_escape(s.id) << "\"><circle cx=\"" << num(px(h.x))
            << "\" cy=\"" << num(py(h.y)) << "\" r=\"7\" fill=\"none\" stroke=\"" << s.color
            << "\" stroke-width=\"2\"/><text x=\"" << num(px(h.x) + 9) << "\" y=\"" << num(label_y)
            << "\" fill=\"" << s.color << "\" font-size=\"11\">" << xml_escape(h.label) << "</text></g>\n";
      }
    }
    svg << "</g>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace bagua::svg
