// C3 aligned low-rank updates: the concentration of W_Q's update and the similarity of its top
// singular pair with the previous record both step up against their trends and stay high.
#include <fmt/core.h>

#include "change_point.hpp"
#include "lpdiag/analyzers/links.hpp"
#include "series_tools.hpp"

namespace lpdiag::analysis {
LinkResult analyze_updates(const BinnedTrace& t, std::int64_t only_layer) {
  LinkResult best;
  best.id = "C3";
  best.name = "aligned low-rank updates";
  const int K = t.bins;
  double best_effect = 0;
  for (std::size_t l = 0; l < t.layers.size(); ++l) {
    if (only_layer >= 0 && t.layers[l] != only_layer) continue;
    std::vector<double> sim(static_cast<std::size_t>(K), tools::nan()), conc(static_cast<std::size_t>(K), tools::nan());
    for (int b = 0; b < K; ++b) {
      const LayerBin& x = t.layer_at(l, b);
      if (x.sim_n > 0) sim[b] = x.sim_sum / x.sim_n;
      if (x.conc_n > 0) conc[b] = x.conc_sum / x.conc_n;
    }
    // Both are per-record statistics, scattered around their level (the similarity of the top
    // singular pair by ~0.1 from record to record on the H200 runs): a level that moves by 0.15 or
    // more, beyond 5 s.e. of its mean after the change, and stays.
    const cp::Rise rs = cp::sustained_rise(sim, 5, 0.15, /*on_mean=*/true), rc = cp::sustained_rise(conc, 5, 0.15, /*on_mean=*/true);
    if (!rs.ok || !rc.ok) continue;
    if (rs.d <= best_effect) continue;
    best_effect = rs.d;
    // Both must be high: the later of the two onsets.
    const int onset = std::max(rs.onset, rc.onset);
    tools::set_found(best, t, onset, t.layers[l], -1, rs.d, 1.0 - std::max(rs.margin / rs.d, rc.margin / rc.d), sim);
    best.evidence = fmt::format("W_Q updates of layer {}: top-pair similarity {:.2f} -> {:.2f}, concentration {:.2f} -> {:.2f}",
                                t.layers[l], rs.before, rs.after, rc.before, rc.after);
  }
  if (!best.present && only_layer >= 0)
    best.evidence = fmt::format("layer {}'s W_Q update concentration and similarity did not both step up and stay high", only_layer);
  else if (!best.present)
    best.evidence = t.has_updates ? "no layer whose W_Q update concentration and similarity both stepped up and stayed high"
                                  : "the trace holds no update statistics for attn_q matrices";
  return best;
}

}  // namespace lpdiag::analysis
