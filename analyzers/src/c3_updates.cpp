// C3 aligned low-rank updates: the concentration of W_Q's update and the similarity of its top
// singular pair with the previous record rise above their baselines and stay high.
#include <fmt/core.h>

#include "lpdiag/analyzers/links.hpp"
#include "series_tools.hpp"

namespace lpdiag::analysis {

LinkResult analyze_updates(const BinnedTrace& t) {
  LinkResult best;
  best.id = "C3";
  best.name = "aligned low-rank updates";
  const int K = t.bins, base_end = std::max(3, K / 5), window = std::max(3, K / 25);
  double best_effect = 0;
  for (std::size_t l = 0; l < t.layers.size(); ++l) {
    std::vector<double> sim(static_cast<std::size_t>(K), tools::nan()), conc(static_cast<std::size_t>(K), tools::nan());
    for (int b = 0; b < K; ++b) {
      const LayerBin& x = t.layer_at(l, b);
      if (x.sim_n > 0) sim[b] = x.sim_sum / x.sim_n;
      if (x.conc_n > 0) conc[b] = x.conc_sum / x.conc_n;
    }
    const auto bs = tools::finite_values(sim, 0, base_end), bc = tools::finite_values(conc, 0, base_end);
    if (bs.size() < 3 || bc.size() < 3) continue;
    const double s0 = tools::median(bs), c0 = tools::median(bc);
    const double ms = std::max(5 * tools::robust_sd(bs), 0.15), mc = std::max(5 * tools::robust_sd(bc), 0.15);
    // Both must clear their thresholds: score = the smaller of the two normalized rises.
    std::vector<double> score(static_cast<std::size_t>(K), tools::nan());
    for (int b = 0; b < K; ++b)
      if (std::isfinite(sim[b]) && std::isfinite(conc[b])) score[b] = std::min((sim[b] - s0) / ms, (conc[b] - c0) / mc);
    const int onset = tools::sustained_onset(score, 0, window, 0.8, [](double x) { return x >= 1.0; });
    if (onset < 0) continue;
    if (!(tools::mean_of(score, onset, K) >= 1.0)) continue;  // must stay high
    const double effect = tools::mean_of(sim, onset, K) - s0;
    if (effect <= best_effect) continue;
    best_effect = effect;
    tools::set_found(best, t, onset, t.layers[l], -1, effect, 1.0 - 1.0 / tools::mean_of(score, onset, K), sim);
    best.evidence = fmt::format("W_Q updates of layer {}: top-pair similarity {:.2f} -> {:.2f}, concentration {:.2f} -> {:.2f}",
                                t.layers[l], s0, tools::mean_of(sim, onset, K), c0, tools::mean_of(conc, onset, K));
  }
  if (!best.present)
    best.evidence = t.has_updates ? "no layer whose W_Q update concentration and similarity rose and stayed high"
                                  : "the trace holds no update statistics for attn_q matrices";
  return best;
}

}  // namespace lpdiag::analysis
