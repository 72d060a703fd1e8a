// C1 trigger: the repeated-max row rate of one (layer, head) steps up against its own trend.
#include <fmt/core.h>

#include "change_point.hpp"
#include "lpdiag/analyzers/links.hpp"
#include "series_tools.hpp"

namespace lpdiag::analysis {

LinkResult analyze_trigger(const BinnedTrace& t) {
  LinkResult best;
  best.id = "C1";
  best.name = "trigger (repeated maxima)";
  const int K = t.bins, smooth = std::max(1, K / 200), min_post = std::max(3, K / 25);
  double best_effect = 0;
  std::string seen = "no attention counters in the trace";
  for (std::size_t l = 0; l < t.layers.size(); ++l)
    for (std::int64_t h = 0; h < t.heads; ++h) {
      const auto r = repeated_rate(t, l, h);
      if (tools::finite_values(r, 0, K).size() < 6) continue;
      seen = "no (layer, head) whose repeated-max rate stepped up by max(6 noise s.d., 0.5 pct points) over its trend";
      const auto rs = cp::running_median(r, smooth);
      const cp::Fit f = cp::fit_ramp(rs, 2, min_post, false, +1);
      if (!f.ok) continue;
      const double noise = cp::diff_noise_sd(r);
      const double margin = std::max(6 * noise, 0.005);
      const double d = cp::step_effect(f);
      if (!(d > margin) || d <= best_effect) continue;
      // Sustained: most bins from tau on stay above the trend by half the step.
      int seen_n = 0, up = 0;
      for (int b = std::min(f.tau + std::max(0, f.width), std::max(f.tau, K - min_post)); b < K; ++b)
        if (std::isfinite(rs[b])) ++seen_n, up += rs[b] - f.a - f.s * b > cp::effect_at(f, b) / 2;
      if (seen_n == 0 || up < 0.7 * seen_n) continue;
      const int onset = cp::walk_back_onset(rs, f, std::max(3 * noise / std::sqrt(2.0 * smooth + 1), d / 10), +1);
      const double base = f.a + f.s * onset;
      best_effect = d;
      tools::set_found(best, t, onset, t.layers[l], h, d, 1.0 - margin / d, r);
      best.evidence = fmt::format("repeated-max row rate of layer {} head {} stepped up from {:.4f} to {:.4f} at step {} "
                                  "(step {:.4f} over its trend, noise s.d. {:.2g})",
                                  t.layers[l], h, std::max(0.0, base), base + d, best.onset_step, d, noise);
    }
  if (!best.present) best.evidence = seen;
  return best;
}

}  // namespace lpdiag::analysis
