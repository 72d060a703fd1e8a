#include "lpdiag/analyzers/chain.hpp"

#include <fmt/core.h>

#include <cmath>

#include "series_tools.hpp"

namespace lpdiag::analysis {
namespace {

// Pearson correlation of x[b] with y[b + lag], the best lag in [0, max_lag], Fisher's p.
LagCorrelation lagged_correlation(const std::vector<double>& x, const std::vector<double>& y, int max_lag) {
  LagCorrelation best;
  for (int lag = 0; lag <= max_lag; ++lag) {
    double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
    int n = 0;
    for (std::size_t b = 0; b + lag < x.size(); ++b) {
      const double a = x[b], c = y[b + lag];
      if (!std::isfinite(a) || !std::isfinite(c)) continue;
      ++n, sx += a, sy += c, sxx += a * a, syy += c * c, sxy += a * c;
    }
    if (n < 8) continue;
    const double cov = sxy - sx * sy / n, vx = sxx - sx * sx / n, vy = syy - sy * sy / n;
    if (vx <= 0 || vy <= 0) continue;
    const double r = cov / std::sqrt(vx * vy);
    const double z = std::atanh(std::min(0.999999, std::max(-0.999999, r))) * std::sqrt(double(n - 3));
    const double p = std::min(1.0, std::erfc(std::fabs(z) / std::sqrt(2.0)) * (max_lag + 1));
    if (!best.computed || r > best.r) best = {true, lag, r, p, n};
  }
  return best;
}

// The bins up to and including the one where values first turned non-finite: after it the
// model computes on NaN, and its counters (every row "repeated", say) are no evidence.
BinnedTrace before_nonfinite(const BinnedTrace& t) {
  if (t.first_nonfinite_step < 0) return t;
  const double x = double(t.first_nonfinite_step - t.first_step) / t.bin_width;
  const int keep = std::min(t.bins, static_cast<int>(std::max(0.0, x)) + 1);
  if (keep >= t.bins) return t;
  BinnedTrace u = t;
  u.bins = keep;
  u.steps.resize(static_cast<std::size_t>(keep));
  const auto K = static_cast<std::size_t>(t.bins), k = static_cast<std::size_t>(keep);
  u.head_bins.clear();
  for (std::size_t s = 0; s < t.layers.size() * static_cast<std::size_t>(t.heads); ++s)
    u.head_bins.insert(u.head_bins.end(), t.head_bins.begin() + static_cast<long>(s * K), t.head_bins.begin() + static_cast<long>(s * K + k));
  u.layer_bins.clear();
  for (std::size_t s = 0; s < t.layers.size(); ++s)
    u.layer_bins.insert(u.layer_bins.end(), t.layer_bins.begin() + static_cast<long>(s * K), t.layer_bins.begin() + static_cast<long>(s * K + k));
  return u;
}

}  // namespace

ChainResult reconstruct_chain(const BinnedTrace& full, double bias_z) {
  ChainResult c;
  const BinnedTrace t = before_nonfinite(full);
  c.links = {analyze_trigger(t), analyze_bias(t, bias_z), analyze_updates(t), analyze_growth(t), analyze_loss(t)};
  c.run = judge_run(full, c.links[4]);
  const LinkResult &c1 = c.links[0], &c2 = c.links[1], &c3 = c.links[2], &c4 = c.links[3];
  LinkResult& c5 = c.links[4];
  // The chain ends in the run's failure, whatever its kind: a stall with exploding logits ends it
  // as well as a loss spike does.
  if (!c5.present && !c.run.healthy) {
    c5.present = true;
    c5.onset_bin = c.run.failure.onset_bin;
    c5.onset_step = c.run.failure.onset_step;
    c5.confidence = 1.0;
    c5.evidence = "no loss spike, but the run failed: " + c.run.failure.kind + ": " + c.run.failure.evidence;
  }
  for (const auto& l : c.links)
    if (!l.present) c.missing_links.push_back(l.id);

  if (c.run.healthy) c.findings.push_back("run verdict: healthy (no loss explosion or stall, no attention-logit explosion, all values finite)");
  else
    c.findings.push_back(fmt::format("run verdict: FAILED, {} from step {}: {}", c.run.failure.kind, c.run.failure.onset_step,
                                     c.run.failure.evidence));
  if (full.rates_above_one > 0 || full.negative_norms > 0 || full.other_impossible > 0)
    c.findings.push_back(fmt::format("WARNING: the trace holds values that cannot be right, skipped as unmeasured: {} counters with more "
                                     "repeated-max rows than rows, {} negative spectral norms, {} others (counts below -1, negative "
                                     "sums of squares, concentration or similarity outside [0, 1]; a writer bug or a foreign producer?)",
                                     full.rates_above_one, full.negative_norms, full.other_impossible));
  if (t.bins < full.bins)
    c.findings.push_back(fmt::format("the links are read up to step {}, where values turned non-finite; later records describe a broken model",
                                     full.first_nonfinite_step));
  for (const auto& l : c.links)
    if (l.present) c.findings.push_back(fmt::format("{} {} from step {}: {}", l.id, l.name, l.onset_step, l.evidence));
    else c.findings.push_back(fmt::format("{} {} not found: {}", l.id, l.name, l.evidence));

  const double g_all = global_growth(t);
  if (!c4.present && std::isfinite(g_all) && g_all >= 2.0)
    c.findings.push_back(fmt::format("sigma_1 of W_Q grew in all heads alike (median head {:.1f}x): growth that is not localized, as a "
                                     "too-high learning rate makes it, is not the rounding path",
                                     g_all));
  // Onsets within a twentieth of the run (at least one bin) are together: that is the accuracy
  // an onset is found to on ramps of any shape (docs/ANALYZERS.md), so no order can be read.
  const int tol = std::max(1, t.bins / 20);
  if (c1.present && c2.present && c4.present) {
    const int lo = std::min({c1.onset_bin, c2.onset_bin, c4.onset_bin}), hi = std::max({c1.onset_bin, c2.onset_bin, c4.onset_bin});
    if (hi - lo <= tol) {
      c.simultaneous = true;
      c.findings.push_back(fmt::format("trigger, bias and growth start together (steps {}, {}, {}): this trace cannot tell which came first",
                                       c1.onset_step, c2.onset_step, c4.onset_step));
    }
  }
  const std::string decide =
      "the run that decides: the same config, seed and data order with fp32 attention (gpt2_train --attention sdpa-fp32) or with the "
      "fix (--fix safe), then `lpdiag analyze RUN.h5 --reference REF.h5`";
  auto no_chain = [&](const std::string& why) {
    c.findings.push_back("no causal chain: " + why);
    if (!c.run.healthy) {
      c.decide = decide;
      c.findings.push_back("whether attention numerics caused this failure is open; " + decide);
    }
    return c;
  };

  if (!c.missing_links.empty()) {
    std::string m;
    for (const auto& id : c.missing_links) m += (m.empty() ? "" : ", ") + id;
    if (!c.run.healthy && !c2.present)
      c.findings.push_back("the failure is not explained by biased attention rounding: no biased delta error was recorded");
    else if (c4.present && !c1.present)
      c.findings.push_back("W_Q's spectral norm grew without the repeated-maxima trigger");
    else if (c2.present && !c4.present && c.run.healthy)
      c.findings.push_back("biased rounding is present but has not (yet) grown W_Q's spectral norm: an early warning");
    return no_chain("missing " + m);
  }

  // Ordered onsets (slack `tol`: onsets that close are simultaneous).
  const std::array<const LinkResult*, 5> ls = {&c1, &c2, &c3, &c4, &c5};
  for (int i = 0; i + 1 < 5; ++i)
    if (ls[i]->onset_bin > ls[i + 1]->onset_bin + tol)
      return no_chain(fmt::format("{} starts at step {}, after {} at step {}", ls[i]->id, ls[i]->onset_step, ls[i + 1]->id,
                                  ls[i + 1]->onset_step));
  // One localization.
  if (!(c1.layer_index == c2.layer_index && c2.layer_index == c3.layer_index && c3.layer_index == c4.layer_index) ||
      !(c1.head == c2.head && (c4.head < 0 || c4.head == c2.head)))
    return no_chain(fmt::format("the links are not localized together (C1 layer {} head {}, C2 layer {} head {}, C3 layer {}, C4 layer {} head {})",
                                c1.layer_index, c1.head, c2.layer_index, c2.head, c3.layer_index, c4.layer_index, c4.head));
  // Bias drives growth: delta error mean (signed so the bias is positive) against the growth
  // rate of log sigma_1, lagged.
  const std::size_t slot = t.layer_slot(c2.layer_index);
  const auto dm = delta_z(t, slot, c2.head);  // z per bin: bins hold different record counts
  const auto sig = head_sigma(t, slot, c4.head);
  const double sign = c2.effect >= 0 ? 1.0 : -1.0;
  std::vector<double> x(dm.size(), tools::nan()), y(dm.size(), tools::nan());
  for (std::size_t b = 0; b < dm.size(); ++b) {
    x[b] = sign * dm[b];
    if (b > 0 && sig[b] > 0 && sig[b - 1] > 0) y[b] = std::log(sig[b]) - std::log(sig[b - 1]);
  }
  c.correlation = lagged_correlation(x, y, std::max(1, t.bins / 20));
  // p < 0.01 (Bonferroni over the lags): the other four conditions already guard precision, and
  // a run cut short by non-finite values leaves few bins (docs/ANALYZERS.md).
  if (!c.correlation.computed || !(c.correlation.r > 0 && c.correlation.p < 1e-2))
    return no_chain(fmt::format("the bias does not track the growth rate (lagged r {:.2f}, p {:.2g})", c.correlation.r, c.correlation.p));
  c.found = true;
  c.layer_index = c2.layer_index;
  c.head = c2.head;
  double conf = 1.0;
  for (const auto& l : c.links) conf = std::min(conf, l.confidence);
  c.confidence = conf * (1.0 - c.correlation.p);
  c.findings.push_back(fmt::format("causal chain at layer {} head {}: bias leads growth by {} bins (r {:.2f}, p {:.2g})",
                                   c.layer_index, c.head, c.correlation.lag_bins, c.correlation.r, c.correlation.p));
  if (c.simultaneous)
    c.findings.push_back("the order of trigger, bias and growth is not resolved in this trace; " + decide);
  c.findings.push_back("order and correlation suggest, they do not prove: a counterfactual run decides (" + decide + ")");
  return c;
}

}  // namespace lpdiag::analysis
