#include "lpdiag/attention/summary.hpp"

#include <cmath>

#include "lpdiag/stats/bias_tests.hpp"

namespace lpdiag {

namespace {

void fill_errors(AttentionSummary& s, const ErrorAccumulator& o_err, const std::vector<ErrorAccumulator>& by_column,
                 const ErrorAccumulator& delta_err) {
  s.o_err_mean = o_err.mean();
  s.o_err_z = mean_z(o_err.count(), o_err.sum(), o_err.sumsq());
  for (const auto& c : by_column) {
    const double z = mean_z(c.count(), c.sum(), c.sumsq());
    if (std::isfinite(z) ? std::fabs(z) > std::fabs(s.o_err_worst_column_z) : !std::isnan(z)) s.o_err_worst_column_z = z;
  }
  s.delta_err_mean = delta_err.mean();
  s.delta_err_z = mean_z(delta_err.count(), delta_err.sum(), delta_err.sumsq());
  s.driver_d = delta_err.sum();
  s.o_err_rms = o_err.count() > 0 ? std::sqrt(o_err.sumsq() / static_cast<double>(o_err.count())) : 0.0;
}

}  // namespace

AttentionSummary summarize_output(const std::string& name, const std::string& fix, const OutputErrors& e) {
  AttentionSummary s;
  s.policy = name;
  s.fix = fix;
  s.fix_json = "{}";
  fill_errors(s, e.o_err, e.o_err_by_column, e.delta_err);
  s.nan_count = e.nan_count;
  return s;
}

AttentionSummary summarize(const AttentionConfig& cfg, const AttentionRun& run) {
  AttentionSummary s;
  s.policy = policy_name(cfg.policy);
  if (cfg.policy == Policy::fp8_p) s.policy += cfg.fp8_format == FormatId::e5m2 ? ":e5m2" : ":e4m3";
  s.fix = cfg.fix.name();
  s.fix_json = cfg.fix.to_json();
  fill_errors(s, run.o_err, run.o_err_by_column, run.delta_err);
  for (const auto& h : run.heads) {
    s.rows += h.rows;
    s.repeated_max_rows += h.repeated_max_rows;
    s.pbar_one_entries += h.pbar_one_entries;
    s.fix_engaged_rows += h.fix_engaged_rows;
  }
  s.nan_count = run.nan_count;
  return s;
}

ExactReference exact_reference(const AttentionInputs& in, bool causal, double scale) {
  AttentionConfig rc;
  rc.policy = Policy::fp32;  // any policy: only its fp64 reference is used
  rc.causal = causal;
  rc.scale = scale;
  AttentionOptions opt;
  opt.backward = false;
  opt.keep_reference = true;
  ExactReference r{run_attention(rc, in, opt), {}};
  const std::vector<float> o = correctly_rounded_output(r.reference);
  r.exact = summarize_output("exact-rounding", "-", output_errors(r.reference, o.data(), in.dout));
  return r;
}

}  // namespace lpdiag
