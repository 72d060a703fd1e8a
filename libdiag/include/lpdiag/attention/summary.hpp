// One line of evidence per attention run: the numbers `lpdiag replay` and `lpdiag probe` report.
#pragma once
#include <cstdint>
#include <string>

#include "lpdiag/attention/engine.hpp"

namespace lpdiag {

struct AttentionSummary {
  std::string policy, fix;
  std::string fix_json;  // the fix with its parameters
  double o_err_mean = 0, o_err_z = 0;
  double o_err_worst_column_z = 0;  // the column with the largest |z| (signed)
  double delta_err_mean = 0, delta_err_z = 0;
  double driver_d = 0;  // sum over rows of (delta_lp - delta_hp)
  double o_err_rms = 0;
  std::int64_t rows = 0, repeated_max_rows = 0, pbar_one_entries = 0, fix_engaged_rows = 0, nan_count = 0;
};

AttentionSummary summarize(const AttentionConfig& cfg, const AttentionRun& run);

// The same evidence for an output made elsewhere (a GPU kernel, a recording, exact rounding),
// judged by output_errors; `name` goes in the policy column, `fix` in the fix column.
AttentionSummary summarize_output(const std::string& name, const std::string& fix, const OutputErrors& e);

// The fp64 reference of some inputs (forward only, kept for output_errors) and the
// `exact-rounding` row: that reference rounded once to bf16, judged like any output. Every
// probe and replay table starts from it. scale 0: 1/sqrt(d).
struct ExactReference {
  AttentionRun reference;
  AttentionSummary exact;
};
ExactReference exact_reference(const AttentionInputs& in, bool causal, double scale = 0.0);

}  // namespace lpdiag
