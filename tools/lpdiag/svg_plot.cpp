#include "svg_plot.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

namespace lpdiag::cli {

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '&') o += "&amp;";
    else if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

std::string render_svg(const Plot& p, int width, int height) {
  const double left = 70, right = 150, top = 28, bottom = 36;
  const double pw = width - left - right, ph = height - top - bottom;
  auto ty = [&](double v) { return p.log_y ? std::log10(v) : v; };
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (double x : p.x) xmin = std::min(xmin, x), xmax = std::max(xmax, x);
  for (const auto& s : p.series)
    for (double v : s.y)
      if (std::isfinite(v) && (!p.log_y || v > 0)) ymin = std::min(ymin, ty(v)), ymax = std::max(ymax, ty(v));
  std::string svg = fmt::format(R"S(<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}">)S", width,
                                height, width, height);
  svg += fmt::format(R"S(<text x="{}" y="18" font-size="14" font-weight="bold">{}</text>)S", left, html_escape(p.title));
  if (!(xmax > xmin)) xmax = xmin + 1;
  if (!std::isfinite(ymin)) {
    svg += fmt::format(R"S(<text x="{}" y="{}" font-size="12" fill="#888">no data in this trace</text></svg>)S", left, top + ph / 2);
    return svg;
  }
  if (!(ymax > ymin)) ymax = ymin + 1;
  const double pad = 0.05 * (ymax - ymin);
  ymin -= pad, ymax += pad;
  auto X = [&](double x) { return left + (x - xmin) / (xmax - xmin) * pw; };
  auto Y = [&](double y) { return top + ph - (y - ymin) / (ymax - ymin) * ph; };
  svg += fmt::format(R"S(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#999"/>)S", left, top, pw, ph);
  for (int i = 0; i <= 4; ++i) {
    const double yv = ymin + (ymax - ymin) * i / 4, xv = xmin + (xmax - xmin) * i / 4;
    const double shown = p.log_y ? std::pow(10.0, yv) : yv;
    svg += fmt::format(R"S(<text x="{}" y="{}" font-size="10" text-anchor="end">{:.3g}</text>)S", left - 4, Y(yv) + 3, shown);
    svg += fmt::format(R"S(<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#eee"/>)S", left, left + pw, Y(yv), Y(yv));
    svg += fmt::format(R"S(<text x="{}" y="{}" font-size="10" text-anchor="middle">{:.0f}</text>)S", X(xv), top + ph + 14, xv);
  }
  svg += fmt::format(R"S(<text x="{}" y="{}" font-size="11" text-anchor="middle">step</text>)S", left + pw / 2, height - 4);
  svg += fmt::format(R"S(<text x="14" y="{}" font-size="11" transform="rotate(-90 14 {})" text-anchor="middle">{}</text>)S", top + ph / 2,
                     top + ph / 2, html_escape(p.y_label + (p.log_y ? " (log scale)" : "")));
  for (const auto& m : p.markers) {
    if (m.step < xmin || m.step > xmax) continue;
    svg += fmt::format(R"S(<line class="onset" x1="{0}" x2="{0}" y1="{1}" y2="{2}" stroke="#c00" stroke-dasharray="4 3"/>)S", X(double(m.step)), top, top + ph);
    svg += fmt::format(R"S(<text x="{}" y="{}" font-size="10" fill="#c00">{}</text>)S", X(double(m.step)) + 2, top + 10, html_escape(m.label));
  }
  int li = 0;
  for (const auto& s : p.series) {
    // A series valued in under half of its points is sparse by design (a statistic recorded every
    // Nth step): its points are joined across the gaps and each is drawn as a dot. A dense series
    // keeps its gaps (NaN there means not measured).
    std::size_t valued = 0;
    for (std::size_t i = 0; i < s.y.size() && i < p.x.size(); ++i) valued += std::isfinite(s.y[i]) && (!p.log_y || s.y[i] > 0);
    const bool sparse = 2 * valued < std::min(s.y.size(), p.x.size());
    std::string d, dots;
    bool pen = false;
    for (std::size_t i = 0; i < s.y.size() && i < p.x.size(); ++i) {
      const double v = s.y[i];
      if (!std::isfinite(v) || (p.log_y && v <= 0)) {
        pen = pen && sparse;
        continue;
      }
      d += fmt::format("{}{:.1f},{:.1f} ", pen ? "L" : "M", X(p.x[i]), Y(ty(v)));
      if (sparse) dots += fmt::format(R"S(<circle cx="{:.1f}" cy="{:.1f}" r="1.8" fill="{}"/>)S", X(p.x[i]), Y(ty(v)), s.color);
      pen = true;
    }
    svg += fmt::format(R"S(<path class="series" d="{}" fill="none" stroke="{}" stroke-width="1.4"/>)S", d.empty() ? "M0,0" : d, s.color);
    svg += dots;
    if (valued == 0) {
      svg += fmt::format(R"S(<text x="{}" y="{}" font-size="10" fill="#888">{}: no data</text>)S", left + 8, top + 14 + 13 * li,
                         html_escape(s.name));
    }
    svg += fmt::format(R"S(<rect x="{}" y="{}" width="10" height="3" fill="{}"/><text x="{}" y="{}" font-size="10">{}</text>)S",
                       left + pw + 8, top + 6 + 13 * li, s.color, left + pw + 22, top + 10 + 13 * li, html_escape(s.name));
    ++li;
  }
  svg += "</svg>";
  return svg;
}

}  // namespace lpdiag::cli
