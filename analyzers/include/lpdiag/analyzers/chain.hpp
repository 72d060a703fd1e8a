// The causal chain on top of the five link analyzers: ordered onsets, one localization, and a
// significant lagged correlation between the rounding bias (C2) and the growth rate (C4). When
// the evidence does not support a chain, it says which link is missing instead of inventing one.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "lpdiag/analyzers/binned_trace.hpp"
#include "lpdiag/analyzers/links.hpp"
#include "lpdiag/analyzers/run_verdict.hpp"

namespace lpdiag::analysis {

struct LagCorrelation {
  bool computed = false;
  int lag_bins = 0;
  double r = 0, p = 1;  // one-sided p (r > 0), Bonferroni-corrected over the lags tried
  int n = 0;
  // The number of independent pairs the n autocorrelated ones are worth (at most n): p is
  // computed with it.
  double n_eff = 0;
};

struct ChainResult {
  bool found = false;
  // Every link present, ordered and in one head, but whether the bias drives the growth could
  // not be tested (too few bins while W_Q grows for the co-variation test to have the power,
  // and none seen): a candidate, not a chain. layer_index and head name the candidate; `decide`
  // the run that settles it. Order and a whole-run correlation alone are not evidence: growth
  // of another cause that starts after the bias shows them too.
  bool undecided = false;
  std::int64_t layer_index = -1, head = -1;  // the chain's, or the undecided candidate's
  double confidence = 0;
  std::array<LinkResult, 5> links;
  LagCorrelation correlation;
  std::vector<std::string> missing_links;  // ids of absent links
  // A missing link the trace could not have shown, so no evidence against the chain: "C3" when
  // the run failed so close to the trace's end that a step up of the layer's W_Q updates at the
  // failure (where it comes in the failing runs) would fall after the last bins its test reads.
  // The chain is then at most an undecided candidate. Empty otherwise.
  std::string untested;
  // Why the chain was rejected ("missing C3", "the links are not localized together (...)", ...),
  // empty when it was not: the headline's reason.
  std::string rejected_because;
  std::vector<std::string> findings;       // sentences for people
  RunVerdict run;                          // failed or healthy, independent of the chain
  bool simultaneous = false;               // trigger, bias and growth start together (no order)
  // A failed run whose biased delta error (C2) began no later than the failure (within the onset
  // slack): the bias can have contributed. False when none was recorded, or it began after.
  bool bias_before_failure = false;
  // How "bias drives growth" was judged: "covariation" (the growth rate rose and fell with a
  // varying bias, or a test with the power saw it did not), "timing" (the test lacked the power:
  // only order and whole-run correlation, so undecided), "reference" (an undecided candidate
  // whose failure a counterfactual reference run attributes to the attention numerics:
  // settle_with_reference), or "" when the chain failed before.
  std::string driving;
  std::string decide;                      // the counterfactual run that would decide, if any
  // Index in `findings` of the question only a counterfactual run answers (caused by the
  // attention numerics?), or -1; settle_with_reference (reference_run.hpp) puts the answer there.
  int open_finding = -1;
  // Whether the trace holds enough records for any verdict: under kMinRecords the rules cannot
  // tell a trend from noise, and "healthy" or "no counters" would be false statements.
  bool judged = true;
  std::int64_t records = 0;
  // Layers whose counters the writer could not record (the trace's unregistered_layer events):
  // the verdict lacks them, and a gate must not call the trace clean.
  std::int64_t recording_problems = 0;
};

inline constexpr std::int64_t kMinRecords = 10;

ChainResult reconstruct_chain(const BinnedTrace& t, double bias_z = 4.0);

// The smallest confidence of the five links: a chain is as sure as its weakest link.
double weakest_link_confidence(const ChainResult& c);

// The ids of the links the chain lacks, ", "-joined ("C3, C4, C5"); "" when none is missing.
std::string missing_links_text(const ChainResult& c);
// "C3, which the trace ends too soon after the failure to show": the untested link as the
// headline and the report name it (empty when none is untested).
std::string untested_link_text(const ChainResult& c);

// The counterfactual the chain asks for by default: fp32 attention, or the fix.
inline constexpr const char* kFp32OrFix =
    "with fp32 attention (Python: lpdiag.attention(..., policy=\"fp32\"); C++ example: gpt2_train --attention sdpa-fp32) or with "
    "the fix (fix=\"paper\"; --fix paper)";
// "the run that decides: the same config, seed and data order <counterfactual>, then `lpdiag
// analyze RUN.h5 --reference REF.h5`": ChainResult::decide and the open question's ending.
std::string deciding_run(const std::string& counterfactual = kFp32OrFix);

}  // namespace lpdiag::analysis
