// C1 trigger: the repeated-max row rate of one (layer, head) rises above its own baseline.
#include <fmt/core.h>

#include "lpdiag/analyzers/links.hpp"
#include "series_tools.hpp"

namespace lpdiag::analysis {

LinkResult analyze_trigger(const BinnedTrace& t) {
  LinkResult best;
  best.id = "C1";
  best.name = "trigger (repeated maxima)";
  const int K = t.bins, base_end = std::max(3, K / 5), window = std::max(3, K / 25);
  double best_effect = 0;
  std::string seen = "no attention counters in the trace";
  for (std::size_t l = 0; l < t.layers.size(); ++l)
    for (std::int64_t h = 0; h < t.heads; ++h) {
      const auto r = repeated_rate(t, l, h);
      const auto base_v = tools::finite_values(r, 0, base_end);
      if (base_v.size() < 3) continue;
      const double base = tools::median(base_v), sd = tools::robust_sd(base_v);
      const double margin = std::max(6 * sd, 0.005);
      const double thr = base + margin;
      seen = "no (layer, head) whose repeated-max rate rose above baseline + max(6 sd, 0.5 pct points)";
      const int onset = tools::sustained_onset(r, 0, window, 0.8, [&](double x) { return x > thr; });
      if (onset < 0) continue;
      const double effect = tools::mean_of(r, onset, K) - base;
      if (effect <= best_effect) continue;
      best_effect = effect;
      tools::set_found(best, t, onset, t.layers[l], h, effect, 1.0 - margin / effect, r);
      best.evidence = fmt::format("repeated-max row rate of layer {} head {} rose from a baseline of {:.4f} to {:.4f} (mean after onset)",
                                  t.layers[l], h, base, base + effect);
    }
  if (!best.present) best.evidence = seen;
  return best;
}

}  // namespace lpdiag::analysis
