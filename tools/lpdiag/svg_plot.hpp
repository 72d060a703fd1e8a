// Line plots as inline SVG, for the self-contained HTML report (no scripts, no network).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lpdiag::cli {

struct PlotSeries {
  std::string name;
  std::vector<double> y;  // NaN = gap
  std::string color;
};

struct PlotMarker {
  std::int64_t step;
  std::string label;
};

struct Plot {
  std::string title;
  std::string y_label;
  std::vector<double> x;  // steps, one per point
  std::vector<PlotSeries> series;
  std::vector<PlotMarker> markers;  // vertical lines (chain onsets)
  bool log_y = false;
};

std::string render_svg(const Plot& p, int width = 860, int height = 260);
std::string html_escape(const std::string& s);

}  // namespace lpdiag::cli
