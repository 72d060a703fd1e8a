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

}  // namespace

ChainResult reconstruct_chain(const BinnedTrace& t, double bias_z) {
  ChainResult c;
  c.links = {analyze_trigger(t), analyze_bias(t, bias_z), analyze_updates(t), analyze_growth(t), analyze_loss(t)};
  for (const auto& l : c.links)
    if (!l.present) c.missing_links.push_back(l.id);
  const LinkResult &c1 = c.links[0], &c2 = c.links[1], &c3 = c.links[2], &c4 = c.links[3], &c5 = c.links[4];

  for (const auto& l : c.links)
    if (l.present) c.findings.push_back(fmt::format("{} {} from step {}: {}", l.id, l.name, l.onset_step, l.evidence));
    else c.findings.push_back(fmt::format("{} {} not found: {}", l.id, l.name, l.evidence));

  if (!c.missing_links.empty()) {
    std::string m;
    for (const auto& id : c.missing_links) m += (m.empty() ? "" : ", ") + id;
    if (c5.present && !c2.present)
      c.findings.push_back("the loss explosion is not explained by biased attention rounding: no biased delta error was recorded");
    else if (c4.present && !c1.present)
      c.findings.push_back("W_Q's spectral norm grew without the repeated-maxima trigger");
    else if (c2.present && !c4.present)
      c.findings.push_back("biased rounding is present but has not (yet) grown W_Q's spectral norm: an early warning");
    c.findings.push_back("no causal chain: missing " + m);
    return c;
  }

  // Ordered onsets (one bin of slack: onsets inside one bin are simultaneous).
  const std::array<const LinkResult*, 5> ls = {&c1, &c2, &c3, &c4, &c5};
  for (int i = 0; i + 1 < 5; ++i)
    if (ls[i]->onset_bin > ls[i + 1]->onset_bin + 1) {
      c.findings.push_back(fmt::format("no causal chain: {} starts at step {}, after {} at step {}", ls[i]->id,
                                       ls[i]->onset_step, ls[i + 1]->id, ls[i + 1]->onset_step));
      return c;
    }
  // One localization.
  if (!(c1.layer_index == c2.layer_index && c2.layer_index == c3.layer_index && c3.layer_index == c4.layer_index) ||
      !(c1.head == c2.head && (c4.head < 0 || c4.head == c2.head))) {
    c.findings.push_back(fmt::format(
        "no causal chain: the links are not localized together (C1 layer {} head {}, C2 layer {} head {}, C3 layer {}, C4 layer {} head {})",
        c1.layer_index, c1.head, c2.layer_index, c2.head, c3.layer_index, c4.layer_index, c4.head));
    return c;
  }
  // Bias drives growth: delta error mean (signed so the bias is positive) against the growth
  // rate of log sigma_1, lagged.
  const std::size_t slot = t.layer_slot(c2.layer_index);
  const auto dm = delta_mean(t, slot, c2.head);
  const auto sig = head_sigma(t, slot, c4.head);
  const double sign = c2.effect >= 0 ? 1.0 : -1.0;
  std::vector<double> x(dm.size(), tools::nan()), y(dm.size(), tools::nan());
  for (std::size_t b = 0; b < dm.size(); ++b) {
    x[b] = sign * dm[b];
    if (b > 0 && sig[b] > 0 && sig[b - 1] > 0) y[b] = std::log(sig[b]) - std::log(sig[b - 1]);
  }
  c.correlation = lagged_correlation(x, y, std::max(1, t.bins / 20));
  if (!c.correlation.computed || !(c.correlation.r > 0 && c.correlation.p < 1e-3)) {
    c.findings.push_back(fmt::format("no causal chain: the bias does not track the growth rate (lagged r {:.2f}, p {:.2g})",
                                     c.correlation.r, c.correlation.p));
    return c;
  }
  c.found = true;
  c.layer_index = c2.layer_index;
  c.head = c2.head;
  double conf = 1.0;
  for (const auto& l : c.links) conf = std::min(conf, l.confidence);
  c.confidence = conf * (1.0 - c.correlation.p);
  c.findings.push_back(fmt::format("causal chain at layer {} head {}: bias leads growth by {} bins (r {:.2f}, p {:.2g})",
                                   c.layer_index, c.head, c.correlation.lag_bins, c.correlation.r, c.correlation.p));
  return c;
}

}  // namespace lpdiag::analysis
