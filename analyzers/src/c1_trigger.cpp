// C1 trigger: the repeated-max row rate of one (layer, head) steps up against its own trend.
#include <fmt/core.h>

#include "change_point.hpp"
#include "lpdiag/analyzers/links.hpp"
#include "series_tools.hpp"

namespace lpdiag::analysis {

LinkResult analyze_trigger(const BinnedTrace& t, std::int64_t only_layer, std::int64_t only_head) {
  LinkResult best;
  best.id = "C1";
  best.name = "trigger (repeated maxima)";
  const int K = t.bins;
  double best_effect = 0;
  std::string seen = "no attention counters in the trace";
  bool any_counters = false;
  for (std::size_t l = 0; l < t.layers.size(); ++l)
    for (std::int64_t h = 0; h < t.heads; ++h) {
      if ((only_layer >= 0 && t.layers[l] != only_layer) || (only_head >= 0 && h != only_head)) continue;
      const auto r = repeated_rate(t, l, h);
      const std::size_t valued = tools::finite_values(r, 0, K).size();
      if (valued > 0 && !any_counters) {
        any_counters = true;
        seen = fmt::format("attention counters in only {} time bins, too few (< 6) to tell a step from noise", valued);
      }
      if (valued < 6) continue;
      seen = "no (layer, head) whose repeated-max rate stepped up by max(6 noise s.d., 0.5 pct points) over its trend";
      const cp::Rise rise = cp::sustained_rise(r, 6, 0.005);
      if (!rise.ok || rise.d <= best_effect) continue;
      best_effect = rise.d;
      tools::set_found(best, t, rise.onset, t.layers[l], h, rise.d, 1.0 - rise.margin / rise.d, r);
      const double base = rise.before, d = rise.d, noise = rise.noise;
      best.evidence = fmt::format("repeated-max row rate of layer {} head {} stepped up from {:.4f} to {:.4f} at step {} "
                                  "(step {:.4f} over its trend, noise s.d. {:.2g})",
                                  t.layers[l], h, std::max(0.0, base), base + d, best.onset_step, d, noise);
    }
  if (!best.present) best.evidence = seen;
  return best;
}

}  // namespace lpdiag::analysis
