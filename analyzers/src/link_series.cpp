// Per-bin series shared by the link analyzers.
#include <cmath>

#include "lpdiag/analyzers/links.hpp"
#include "lpdiag/stats/bias_tests.hpp"
#include "series_tools.hpp"

namespace lpdiag::analysis {

namespace {
// One value per bin from the bin's sums for (layer, head); NaN where `f` finds no data.
template <class F>
std::vector<double> per_bin(const BinnedTrace& t, std::size_t layer, std::int64_t head, F f) {
  std::vector<double> r(static_cast<std::size_t>(t.bins), tools::nan());
  for (int b = 0; b < t.bins; ++b) r[b] = f(t.at(layer, head, b));
  return r;
}
}  // namespace

std::vector<double> repeated_rate(const BinnedTrace& t, std::size_t layer, std::int64_t head) {
  return per_bin(t, layer, head, [](const HeadBin& x) { return x.rows > 0 ? x.repeated / x.rows : tools::nan(); });
}

std::vector<double> delta_z(const BinnedTrace& t, std::size_t layer, std::int64_t head) {
  return per_bin(t, layer, head, [](const HeadBin& x) {
    return x.d_count >= 2 ? mean_z(static_cast<std::int64_t>(x.d_count), x.d_sum, x.d_sumsq) : tools::nan();
  });
}

std::vector<double> delta_mean(const BinnedTrace& t, std::size_t layer, std::int64_t head) {
  return per_bin(t, layer, head, [](const HeadBin& x) { return x.d_count > 0 ? x.d_sum / x.d_count : tools::nan(); });
}

std::vector<double> o_z(const BinnedTrace& t, std::size_t layer, std::int64_t head) {
  return per_bin(t, layer, head, [](const HeadBin& x) {
    return x.o_count >= 2 ? mean_z(static_cast<std::int64_t>(x.o_count), x.o_sum, x.o_sumsq) : tools::nan();
  });
}

std::vector<double> head_sigma(const BinnedTrace& t, std::size_t layer, std::int64_t head) {
  std::vector<double> r(static_cast<std::size_t>(t.bins), tools::nan());
  for (int b = 0; b < t.bins; ++b) {
    if (head >= 0) {
      const HeadBin& x = t.at(layer, head, b);
      if (x.sigma_n > 0) r[b] = x.sigma_sum / x.sigma_n;
    } else {
      const LayerBin& x = t.layer_at(layer, b);
      if (x.sigma_n > 0) r[b] = x.sigma_sum / x.sigma_n;
    }
  }
  return r;
}

std::vector<double> loss_series(const BinnedTrace& t) {
  std::vector<double> r(static_cast<std::size_t>(t.bins), tools::nan());
  for (int b = 0; b < t.bins; ++b) {
    const StepBin& s = t.steps[static_cast<std::size_t>(b)];
    if (s.loss_nonfinite > 0) r[b] = INFINITY;
    else if (s.loss_n > 0) r[b] = s.loss_sum / s.loss_n;
  }
  return r;
}

}  // namespace lpdiag::analysis
