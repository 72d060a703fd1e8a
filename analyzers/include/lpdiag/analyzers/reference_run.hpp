// A run against its counterfactual: the same config, seed and data order with other attention
// numerics (fp32 attention, PyTorch's own, the fix). Order and correlation in one trace suggest
// causation; this comparison is what decides it (docs/design.md, "The causal chain").
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "lpdiag/analyzers/chain.hpp"
#include "lpdiag/analyzers/run_facts.hpp"

namespace lpdiag::analysis {

// The head whose W_Q growth C4 singled out in RUN, measured in REF over the same steps: what
// the attention numerics did to that head, whether or not the run failed. Growth is sigma_1 of
// the head's W_Q slice near `to_step` over its value near `from_step` (the median of the three
// nearest recorded bins at each end).
struct HeadGrowthComparison {
  std::int64_t layer_index = -1, head = -1;
  std::int64_t from_step = 0, to_step = 0;  // C4's onset in RUN; the failure's onset or the last step both runs reached
  double run_growth = 0, ref_growth = 0, ref_median_growth = 0;  // the median over all of REF's heads
  // RUN's head grew >= 1.3x as much as the same head in REF, and that head did not stand out in REF.
  bool by_numerics = false;
  std::string evidence;
};

struct ReferenceComparison {
  std::string path;
  bool failed = false;                    // REF's own verdict
  std::optional<bool> attributable;       // true / false / undecided (null)
  std::string evidence;
  // How RUN and REF differ beyond the attention numerics (run_config, model shape, schedules):
  // any makes REF no counterfactual, and the answer null.
  std::vector<std::string> config_differences;
  // Where RUN has C4 and both binned traces carry per-head sigma_1 (REF's W_Q is tracked even
  // when its attention is PyTorch's own); absent otherwise.
  std::optional<HeadGrowthComparison> head_growth;
};

// `run_facts` / `ref_facts`: what each trace holds of its run (read_run_facts). The answer is
// null, with the reason, whenever REF is no counterfactual of RUN: the same attention numerics,
// any difference beyond them, or a REF that ends before RUN's failure began.
// `run_t` / `ref_t`: the binned traces, where at hand: the losses are then compared over the
// last tenth of the steps both runs cover (a run cut short is not compared with the end of a
// longer one); without them, each run's own final loss.
ReferenceComparison compare_with_reference(const std::string& ref_path, const ChainResult& run, const ChainResult& ref,
                                           const RunFacts& run_facts, const RunFacts& ref_facts,
                                           const BinnedTrace* run_t = nullptr, const BinnedTrace* ref_t = nullptr);

// Puts the comparison's answer into RUN's findings: a decided one (true / false) replaces the
// open question (ChainResult::open_finding) and clears `decide`, the run it named having been
// run; an undecided one is added beside the question with its reason. A failure attributable to
// the numerics without a biased delta error is said to act through another path than the chain.
// The head-growth comparison, where there is one, is added as a finding of its own (on a healthy
// run a head the numerics single out is an early warning).
void settle_with_reference(ChainResult& run, const ReferenceComparison& cmp);

}  // namespace lpdiag::analysis
