// Whether a run failed, how and when, independent of the causal chain: a run can fail without
// a loss spike (a stall while the attention logits explode, values turning non-finite), and a
// chain can be absent from a failed run. The verdict is what `analyze` puts first.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lpdiag/analyzers/binned_trace.hpp"
#include "lpdiag/analyzers/links.hpp"

namespace lpdiag::analysis {

struct FailureSign {
  std::string kind;  // loss_explosion, loss_stall, attention_logit_growth, non_finite
  std::int64_t onset_step = -1;
  int onset_bin = -1;
  std::string evidence;
  // attention_logit_growth: the (layer, head) whose max logit ran away first; -1 otherwise.
  std::int64_t layer_index = -1, head = -1;
};

struct RunVerdict {
  bool healthy = true;
  FailureSign failure;              // the primary sign (non-finite first, else the earliest)
  std::vector<FailureSign> signs;   // every sign found, in onset order
  // Signs of trouble that did not stop the run learning (attention-logit growth while the loss
  // kept falling): reported, never the verdict.
  std::vector<FailureSign> warnings;
  double final_loss = 0;            // median of the finite loss over the last tenth (NaN if none)
  double max_logit = -1;            // over the run, -1 where the trace has no logit_max
  std::vector<double> logit_series; // max over heads per bin (NaN where unmeasured)
};

// `c5`: the loss-explosion link of the same trace (its spike is one failure sign).
RunVerdict judge_run(const BinnedTrace& t, const LinkResult& c5);

// Max over all (layer, head) of logit_max per bin; NaN where no head measured it.
std::vector<double> max_logit_series(const BinnedTrace& t);

}  // namespace lpdiag::analysis
