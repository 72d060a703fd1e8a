#include "run_analysis.hpp"

#include "lpdiag/analyzers/recorded_numerics.hpp"

#include "lpdiag/trace/preflight.hpp"
#include "lpdiag/trace/trace_reader.hpp"

namespace lpdiag::cli {

AnalyzedRun analyze_run(const std::vector<std::string>& paths, int bins, double bias_z, int workers, const analysis::Progress& progress,
                        bool o_error) {
  for (const auto& p : paths) preflight_trace(p);
  AnalyzedRun r;
  r.t = analysis::bin_traces(paths, bins, progress, workers, o_error);
  r.c = analysis::reconstruct_chain(r.t, bias_z);
  const TraceReader first(paths.front());
  r.run_config = first.meta().run_config;
  r.numerics = analysis::recorded_numerics(first.layout().attention);
  analysis::account_for_numerics(r.c, r.numerics);
  return r;
}

analysis::ReferenceComparison compare_runs(const AnalyzedRun& run, const std::string& ref_path, const AnalyzedRun& ref) {
  return analysis::compare_with_reference(ref_path, run.c, ref.c, run.run_config, ref.run_config, &run.t, &ref.t);
}

}  // namespace lpdiag::cli
