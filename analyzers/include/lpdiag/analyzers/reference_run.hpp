// A run against its counterfactual: the same config, seed and data order with other attention
// numerics (fp32 attention, PyTorch's own, the fix). Order and correlation in one trace suggest
// causation; this comparison is what decides it (DESIGN.md, "The causal chain").
#pragma once
#include <optional>
#include <string>

#include "lpdiag/analyzers/chain.hpp"

namespace lpdiag::analysis {

struct ReferenceComparison {
  std::string path;
  bool failed = false;                    // REF's own verdict
  std::optional<bool> attributable;       // true / false / undecided (null)
  std::string evidence;
  std::vector<std::string> config_differences;  // run_config keys that differ, beyond the numerics
};

// `run_config` / `ref_config`: the traces' run_config JSON (may be empty or not JSON).
// `run_t` / `ref_t`: the binned traces, where at hand: the losses are then compared over the
// last tenth of the steps both runs cover (a run cut short is not compared with the end of a
// longer one); without them, each run's own final loss.
ReferenceComparison compare_with_reference(const std::string& ref_path, const ChainResult& run, const ChainResult& ref,
                                           const std::string& run_config, const std::string& ref_config,
                                           const BinnedTrace* run_t = nullptr, const BinnedTrace* ref_t = nullptr);

// Puts the comparison's answer into RUN's findings: a decided one (true / false) replaces the
// open question (ChainResult::open_finding) and clears `decide`, the run it named having been
// run; an undecided one is added beside the question with its reason. A failure attributable to
// the numerics without a biased delta error is said to act through another path than the chain.
void settle_with_reference(ChainResult& run, const ReferenceComparison& cmp);

}  // namespace lpdiag::analysis
