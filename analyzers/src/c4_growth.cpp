// C4 spectral growth: sigma_1 of a W_Q head slice grows and keeps growing; the onset is the
// change point of a hinge fit (flat, then linear in log sigma) around the threshold crossing.
#include <fmt/core.h>

#include "lpdiag/analyzers/links.hpp"
#include "series_tools.hpp"

namespace lpdiag::analysis {
namespace {

int hinge_change_point(const std::vector<double>& y, double level, int lo, int hi) {
  int best = hi;
  double best_sse = INFINITY;
  for (int c = lo; c <= hi; ++c) {
    double num = 0, den = 0;
    for (int b = c; b < static_cast<int>(y.size()); ++b)
      if (std::isfinite(y[b])) num += (y[b] - level) * (b - c), den += double(b - c) * (b - c);
    const double slope = den > 0 ? num / den : 0;
    double sse = 0;
    for (int b = lo; b < static_cast<int>(y.size()); ++b) {
      if (!std::isfinite(y[b])) continue;
      const double fit = b < c ? level : level + slope * (b - c);
      sse += (y[b] - fit) * (y[b] - fit);
    }
    if (sse < best_sse) best_sse = sse, best = c;
  }
  return best;
}

}  // namespace

LinkResult analyze_growth(const BinnedTrace& t) {
  LinkResult best;
  best.id = "C4";
  best.name = "spectral growth of W_Q";
  const int K = t.bins, base_end = std::max(3, K / 5), window = std::max(3, K / 25);
  double best_growth = 0;
  const std::int64_t heads = t.has_head_sigma ? t.heads : 1;
  for (std::size_t l = 0; l < t.layers.size(); ++l)
    for (std::int64_t h = 0; h < heads; ++h) {
      const auto sigma = head_sigma(t, l, t.has_head_sigma ? h : -1);
      std::vector<double> y(sigma.size(), tools::nan());
      for (std::size_t b = 0; b < y.size(); ++b)
        if (sigma[b] > 0) y[b] = std::log(sigma[b]);
      const auto base_v = tools::finite_values(y, 0, base_end);
      const auto tail_v = tools::finite_values(y, K - std::max(2, K / 10), K);
      if (base_v.size() < 3 || tail_v.empty()) continue;
      const double y0 = tools::median(base_v), sd = std::max(tools::robust_sd(base_v), 1e-6);
      const double growth = tools::median(tail_v) - y0;
      if (!(growth >= std::log(1.3) && growth > 6 * sd)) continue;
      const double thr = y0 + std::max(4 * sd, std::log(1.05));
      const int cross = tools::sustained_onset(y, 0, window, 0.9, [&](double x) { return x > thr; });
      if (cross < 0) continue;
      if (growth <= best_growth) continue;
      best_growth = growth;
      const int onset = hinge_change_point(y, y0, std::max(0, cross - K / 5), cross);
      tools::set_found(best, t, onset, t.layers[l], t.has_head_sigma ? h : -1, std::exp(growth), 1.0 - std::log(1.3) / growth, sigma);
      best.evidence = fmt::format("sigma_1 of W_Q layer {}{} grew {:.2f}x from a baseline of {:.3g}", t.layers[l],
                                  t.has_head_sigma ? fmt::format(" head {}", h) : std::string(), std::exp(growth), std::exp(y0));
    }
  if (!best.present) best.evidence = "no W_Q (head slice) whose sigma_1 grew >= 1.3x above its baseline and kept growing";
  return best;
}

}  // namespace lpdiag::analysis
