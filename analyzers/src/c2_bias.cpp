// C2 biased rounding: the delta error of one (layer, head) has a significantly non-zero mean
// (|z| >= 4) over a window, keeps one sign for the rest of the run, and its running sum D drifts.
#include <fmt/core.h>

#include "lpdiag/analyzers/links.hpp"
#include "lpdiag/stats/bias_tests.hpp"
#include "series_tools.hpp"

namespace lpdiag::analysis {
namespace {

struct Pool {
  double n = 0, s = 0, ss = 0;
  double z() const { return n >= 2 ? mean_z(static_cast<std::int64_t>(n), s, ss) : 0.0; }
};

Pool pool(const BinnedTrace& t, std::size_t l, std::int64_t h, int b0, int b1) {
  Pool p;
  for (int b = std::max(0, b0); b < std::min(b1, t.bins); ++b) {
    const HeadBin& x = t.at(l, h, b);
    p.n += x.d_count, p.s += x.d_sum, p.ss += x.d_sumsq;
  }
  return p;
}

}  // namespace

LinkResult analyze_bias(const BinnedTrace& t, double z_threshold) {
  LinkResult best;
  best.id = "C2";
  best.name = "biased rounding (delta error)";
  const int K = t.bins, W = std::max(3, K / 40);
  double best_z = 0;
  bool any_data = false;
  for (std::size_t l = 0; l < t.layers.size(); ++l)
    for (std::int64_t h = 0; h < t.heads; ++h) {
      const auto means = delta_mean(t, l, h);
      const auto zb = delta_z(t, l, h);
      if (tools::finite_values(means, 0, K).empty()) continue;
      any_data = true;
      for (int b = 0; b + W <= K; ++b) {
        const Pool win = pool(t, l, h, b, b + W);
        const double wz = win.z();
        if (!(std::fabs(wz) >= z_threshold)) continue;
        const double sign = wz > 0 ? 1 : -1;
        const Pool rest = pool(t, l, h, b, K);
        if (!(rest.z() * sign >= z_threshold)) continue;
        int seen = 0, agree = 0;
        for (int c = b; c < K; ++c)
          if (std::isfinite(means[c])) ++seen, agree += means[c] * sign > 0;
        if (seen < W || agree < 0.7 * seen) continue;
        // The first bin of the window that already leans the same way.
        int onset = b;
        for (int c = b; c < b + W; ++c)
          if (std::isfinite(zb[c]) && zb[c] * sign >= 1) {
            onset = c;
            break;
          }
        const double z_after = pool(t, l, h, onset, K).z();
        if (std::fabs(z_after) > std::fabs(best_z)) {
          best_z = z_after;
          const Pool all = pool(t, l, h, 0, K);
          tools::set_found(best, t, onset, t.layers[l], h, rest.s / rest.n, 1.0 - z_threshold / std::fabs(z_after), zb);
          best.evidence = fmt::format(
              "delta error of layer {} head {}: mean {:+.3e} after the onset (z {:+.1f}), one-signed in {}% of bins; "
              "running driver D = {:+.3e} (drift z {:+.1f})",
              t.layers[l], h, best.effect, z_after, 100 * agree / seen, all.s, all.ss > 0 ? all.s / std::sqrt(all.ss) : 0.0);
        }
        break;  // the first qualifying window is this head's onset
      }
    }
  if (!best.present)
    best.evidence = any_data ? fmt::format("no (layer, head) with a delta-error mean of |z| >= {} that stays one-signed", z_threshold)
                             : "the trace holds no delta-error statistics (instrumentation off?)";
  return best;
}

}  // namespace lpdiag::analysis
