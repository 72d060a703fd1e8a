// Robust statistics and onset finding on per-bin series (NaN = no data). Private.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "lpdiag/analyzers/links.hpp"

namespace lpdiag::analysis::tools {

inline double nan() { return std::nan(""); }

inline std::vector<double> finite_values(const std::vector<double>& x, int b0, int b1) {
  std::vector<double> v;
  for (int b = std::max(0, b0); b < std::min<int>(b1, static_cast<int>(x.size())); ++b)
    if (std::isfinite(x[b])) v.push_back(x[b]);
  return v;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return nan();
  const auto mid = v.begin() + static_cast<long>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  double m = *mid;
  if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), mid)) / 2;
  return m;
}

// 1.4826 x median absolute deviation: the standard deviation for normal data.
inline double robust_sd(const std::vector<double>& v) {
  const double m = median(v);
  std::vector<double> dev;
  for (double x : v) dev.push_back(std::fabs(x - m));
  return 1.4826 * median(dev);
}

// First bin b >= from where cond(b) holds and holds for at least `share` of the data-bearing
// bins in [b, b + window); -1 if none.
template <class Cond>
int sustained_onset(const std::vector<double>& x, int from, int window, double share, Cond cond) {
  const int n = static_cast<int>(x.size());
  for (int b = std::max(0, from); b < n; ++b) {
    if (!std::isfinite(x[b]) || !cond(x[b])) continue;
    int seen = 0, ok = 0;
    for (int c = b; c < std::min(n, b + window); ++c) {
      if (!std::isfinite(x[c])) continue;
      ++seen;
      ok += cond(x[c]);
    }
    if (seen > 0 && ok >= share * seen && seen >= std::min(window, n - b) / 2) return b;
  }
  return -1;
}

inline double mean_of(const std::vector<double>& x, int b0, int b1) {
  const auto v = finite_values(x, b0, b1);
  if (v.empty()) return nan();
  double s = 0;
  for (double y : v) s += y;
  return s / static_cast<double>(v.size());
}

inline double clamp01(double x) { return std::max(0.0, std::min(1.0, x)); }

// Marks `r` present with its onset, place, effect, confidence and evidence series.
inline void set_found(LinkResult& r, const BinnedTrace& t, int onset, std::int64_t layer_index, std::int64_t head,
                      double effect, double confidence, std::vector<double> series) {
  r.present = true;
  r.onset_bin = onset;
  r.onset_step = t.bin_step(onset);
  r.layer_index = layer_index;
  r.head = head;
  r.effect = effect;
  r.confidence = clamp01(confidence);
  r.series = std::move(series);
}

}  // namespace lpdiag::analysis::tools
