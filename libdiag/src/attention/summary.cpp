#include "lpdiag/attention/summary.hpp"

#include <cmath>

#include "lpdiag/stats/bias_tests.hpp"

namespace lpdiag {

AttentionSummary summarize(const AttentionConfig& cfg, const AttentionRun& run) {
  AttentionSummary s;
  s.policy = policy_name(cfg.policy);
  if (cfg.policy == Policy::fp8_p) s.policy += cfg.fp8_format == FormatId::e5m2 ? ":e5m2" : ":e4m3";
  s.fix = cfg.fix.name();
  s.fix_json = cfg.fix.to_json();
  s.o_err_mean = run.o_err.mean();
  s.o_err_z = mean_z(run.o_err.count(), run.o_err.sum(), run.o_err.sumsq());
  for (const auto& c : run.o_err_by_column) {
    const double z = mean_z(c.count(), c.sum(), c.sumsq());
    if (std::isfinite(z) ? std::fabs(z) > std::fabs(s.o_err_worst_column_z) : !std::isnan(z)) s.o_err_worst_column_z = z;
  }
  s.delta_err_mean = run.delta_err.mean();
  s.delta_err_z = mean_z(run.delta_err.count(), run.delta_err.sum(), run.delta_err.sumsq());
  s.driver_d = run.delta_err.sum();
  for (const auto& h : run.heads) {
    s.rows += h.rows;
    s.repeated_max_rows += h.repeated_max_rows;
    s.pbar_one_entries += h.pbar_one_entries;
    s.fix_engaged_rows += h.fix_engaged_rows;
  }
  s.nan_count = run.nan_count;
  return s;
}

}  // namespace lpdiag
