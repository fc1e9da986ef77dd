// Hand-written SVG line charts: panels of series against a shared x (the
// step), each with axes, tick labels and a legend. One <polyline> per
// series, carrying data-series="ID" and data-points="N" so tests and tools
// can find it. Used by `bagua report` and `bagua bench`; xml_escape by every SVG bagua writes.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace bagua::svg {

// Text made safe for XML content and attribute values.
std::string xml_escape(const std::string& s);

// A point of a series ringed and labelled (class="highlight"), such as the
// best evaluation.
struct ChartHighlight {
  double x, y;
  std::string label;
};

struct ChartSeries {
  std::string id;     // data-series attribute: a stable name (e.g. "train_loss")
  std::string label;  // legend text
  std::string color;  // any SVG colour
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in this order
  std::vector<ChartHighlight> highlights = {};
};

struct ChartPanel {
  std::string title;
  std::string y_label;
  std::vector<ChartSeries> series;
  std::string empty_note = "no data";  // written in a panel with no point
};

// About `count` evenly spaced round values (1, 2 or 5 times a power of ten)
// covering [lo, hi]; the first is <= lo and the last >= hi.
std::vector<double> nice_ticks(double lo, double hi, int count);

// A tick label for `v` on an axis whose ticks are `spacing` apart: as few
// digits as the spacing needs, thousands as "k".
std::string tick_label(double v, double spacing);

// A labelled vertical dashed line across every panel at step `x`.
struct ChartMarker {
  double x;
  std::string label;
};

// A standalone SVG: a title line, an optional subtitle, and the panels one
// below the other, all with "step" on the x axis and the same x range;
// each marker is drawn in each panel (class="x-marker").
std::string line_chart_svg(const std::string& title, const std::string& subtitle,
                           const std::vector<ChartPanel>& panels, const std::vector<ChartMarker>& markers = {});

}  // namespace bagua::svg
