// C5 loss explosion: a loss spike, robust z >= 8 over the rolling median of the preceding bins and
// sustained over the next bins, or a non-finite loss.
#include <fmt/core.h>

#include "lpdiag/analyzers/links.hpp"
#include "series_tools.hpp"

namespace lpdiag::analysis {

LinkResult analyze_loss(const BinnedTrace& t) {
  LinkResult r;
  r.id = "C5";
  r.name = "loss explosion";
  const auto x = loss_series(t);
  r.series = x;
  const int K = t.bins, W = std::max(5, K / 20);
  // From the fourth bin on: a spike early in the run is judged against what precedes it.
  for (int b = 0; b < K; ++b) {
    if (std::isnan(x[b])) continue;
    if (std::isinf(x[b])) {
      r.present = true;
      r.onset_bin = b;
      r.onset_step = t.steps[static_cast<std::size_t>(b)].first_nonfinite_step != INT64_MAX ? t.steps[static_cast<std::size_t>(b)].first_nonfinite_step
                                                                                           : t.bin_step(b);
      r.effect = INFINITY;
      r.confidence = 1.0;
      r.evidence = fmt::format("loss became non-finite at step {}", r.onset_step);
      return r;
    }
    const auto prev = tools::finite_values(x, b - W, b);
    if (prev.size() < 3) continue;
    const double med = tools::median(prev);
    const double sd = std::max(tools::robust_sd(prev), 0.01 * std::fabs(med) + 1e-9);
    const double z = (x[b] - med) / sd;
    const bool spike = std::isinf(x[b]) || (z >= 8 && x[b] >= med + 0.3 * std::fabs(med));
    if (!spike) continue;
    // Sustained: a single noisy batch that the next steps undo is no explosion. The median over
    // the bins from b on (a fiftieth of the run, at least 3) must stay 15% above.
    const auto after = tools::finite_values(x, b, b + std::max(3, K / 50));
    if (!std::isinf(x[b]) && after.size() >= 2 && !(tools::median(after) >= med + 0.15 * std::fabs(med))) continue;
    r.present = true;
    r.onset_bin = b;
    r.onset_step = t.bin_step(b);
    r.effect = std::isinf(x[b]) ? INFINITY : x[b] / med;
    r.confidence = std::isinf(x[b]) ? 1.0 : tools::clamp01(1.0 - 8.0 / z);
    if (std::isinf(x[b])) {
      r.evidence = fmt::format("loss became non-finite at step {}", r.onset_step);
      return r;
    }
    // Where the loss went, not only where it first stood out: the peak from the onset on.
    int peak = b;
    for (int k = b; k < K; ++k)
      if (std::isfinite(x[k]) && x[k] > x[peak]) peak = k;
    r.evidence = fmt::format("loss rose from {:.4g} (the median before step {}) to {:.4g} at step {}{} (robust z {:.1f})", med, r.onset_step,
                             x[b], r.onset_step,
                             peak != b ? fmt::format(", and to {:.4g} by step {}", x[peak], t.bin_step(peak)) : std::string(), z);
    return r;
  }
  r.evidence = tools::finite_values(x, 0, K).empty() ? "the trace holds no loss values" : "no loss spike (robust z >= 8 over the rolling median)";
  return r;
}

}  // namespace lpdiag::analysis
