// One run analyzed (its rank files binned, the chain and the verdict), shared by analyze,
// check and report; and a run against its counterfactual reference.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "lpdiag/analyzers/binned_trace.hpp"
#include "lpdiag/analyzers/chain.hpp"
#include "lpdiag/analyzers/recorded_numerics.hpp"
#include "lpdiag/analyzers/reference_run.hpp"
#include "lpdiag/trace/trace_record.hpp"

namespace lpdiag::cli {

struct AnalyzedRun {
  analysis::BinnedTrace t;
  analysis::ChainResult c;
  std::string run_config;  // of the first file
  analysis::RecordedNumerics numerics;  // the attention layers' policy and fix, of the first file
  // The online alarm's and the guard's events the Monitor wrote (alarm, guard_switch,
  // guard_failed), of the first file, in step order.
  std::vector<TraceEvent> alarm_events;
};

// Preflights every file first (clear errors for unusable input).
// `o_error`: also bin the O error sums (the report plots them).
// The live alarm's thresholds as the Monitor recorded them in run_config ("alarm": "default",
// "slow-trigger", "odds-trigger", "off"); nullopt for a trace written before they were recorded.
std::optional<std::string> live_alarm_thresholds(const AnalyzedRun& run);
std::optional<std::string> live_alarm_thresholds(const std::string& run_config);
// One line per alarm and guard event, for analyze and the report; first, when the live alarm ran
// with other thresholds than the default ones, which.
std::vector<std::string> alarm_lines(const AnalyzedRun& run);
AnalyzedRun analyze_run(const std::vector<std::string>& paths, int bins, double bias_z, int workers,
                        const analysis::Progress& progress = {}, bool o_error = false);

// `ref_path`: the reference's trace (one file, or the first rank file).
analysis::ReferenceComparison compare_runs(const AnalyzedRun& run, const std::string& ref_path, const AnalyzedRun& ref);

}  // namespace lpdiag::cli
