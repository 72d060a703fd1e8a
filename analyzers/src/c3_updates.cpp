// C3 aligned low-rank updates: the concentration of W_Q's update and the similarity of its top
// singular pair with the previous record both step up against their trends and stay high.
#include <fmt/core.h>

#include "change_point.hpp"
#include "lpdiag/analyzers/links.hpp"
#include "series_tools.hpp"

namespace lpdiag::analysis {
namespace {

struct Rise {
  bool ok = false;
  int onset = -1;
  double before = 0, after = 0, d = 0, margin = 0;
};

// A sustained step up of at least max(5 noise s.d., 0.15).
Rise step_up(const std::vector<double>& x, int K) {
  Rise r;
  if (tools::finite_values(x, 0, K).size() < 6) return r;
  const auto xs = cp::running_median(x, std::max(1, K / 200));
  const cp::Fit f = cp::fit_ramp(xs, 2, std::max(3, K / 25), false, +1);
  if (!f.ok) return r;
  const double noise = cp::diff_noise_sd(x);
  r.margin = std::max(5 * noise, 0.15);
  r.d = cp::step_effect(f);
  if (!(r.d >= r.margin)) return r;
  int n = 0, up = 0;
  for (int b = std::min(f.tau + std::max(0, f.width), std::max(f.tau, K - std::max(3, K / 25))); b < K; ++b)
    if (std::isfinite(xs[b])) ++n, up += xs[b] - f.a - f.s * b > cp::effect_at(f, b) / 2;
  if (n == 0 || up < 0.7 * n) return r;
  r.onset = cp::walk_back_onset(xs, f, std::max(3 * noise / std::sqrt(2.0 * std::max(1, K / 200) + 1), r.d / 10), +1);
  r.before = f.a + f.s * r.onset;
  r.after = tools::mean_of(x, f.tau, K);
  r.ok = true;
  return r;
}

}  // namespace

LinkResult analyze_updates(const BinnedTrace& t) {
  LinkResult best;
  best.id = "C3";
  best.name = "aligned low-rank updates";
  const int K = t.bins;
  double best_effect = 0;
  for (std::size_t l = 0; l < t.layers.size(); ++l) {
    std::vector<double> sim(static_cast<std::size_t>(K), tools::nan()), conc(static_cast<std::size_t>(K), tools::nan());
    for (int b = 0; b < K; ++b) {
      const LayerBin& x = t.layer_at(l, b);
      if (x.sim_n > 0) sim[b] = x.sim_sum / x.sim_n;
      if (x.conc_n > 0) conc[b] = x.conc_sum / x.conc_n;
    }
    const Rise rs = step_up(sim, K), rc = step_up(conc, K);
    if (!rs.ok || !rc.ok) continue;
    if (rs.d <= best_effect) continue;
    best_effect = rs.d;
    // Both must be high: the later of the two onsets.
    const int onset = std::max(rs.onset, rc.onset);
    tools::set_found(best, t, onset, t.layers[l], -1, rs.d, 1.0 - std::max(rs.margin / rs.d, rc.margin / rc.d), sim);
    best.evidence = fmt::format("W_Q updates of layer {}: top-pair similarity {:.2f} -> {:.2f}, concentration {:.2f} -> {:.2f}",
                                t.layers[l], rs.before, rs.after, rc.before, rc.after);
  }
  if (!best.present)
    best.evidence = t.has_updates ? "no layer whose W_Q update concentration and similarity both stepped up and stayed high"
                                  : "the trace holds no update statistics for attn_q matrices";
  return best;
}

}  // namespace lpdiag::analysis
