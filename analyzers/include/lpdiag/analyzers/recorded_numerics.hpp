// What attention numerics a run recorded (each attention layer's `policy` and `fix` attributes,
// docs/reference/trace-format.md), and what that means for the question the chain leaves open: a run whose
// attention ran in fp32 cannot have failed through low-precision attention rounding, and a run
// that already ran a fix is decided by fp32 attention or by the same run without it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lpdiag/analyzers/chain.hpp"
#include "lpdiag/trace/trace_layout.hpp"

namespace lpdiag::analysis {

struct RecordedNumerics {
  bool known = false;     // the trace declares at least one attention layer
  bool all_fp32 = false;  // every layer ran fp32 attention: lpdiag's fp32 policy or an external backend named "...fp32..."
  bool all_external = false;  // every layer ran attention lpdiag did not run ("external[:backend]"): no counters, no errors
  std::string policy;     // every layer's, joined by ", " where they differ
  std::string fix;        // the fix that ran ("none"), joined likewise
  // Layers whose kernel lpdiag did not run but observed (spec `observed`): their counters and
  // error statistics were measured from outside the kernel, every `observe_every` steps.
  bool observed = false;
  std::int64_t observe_every = 0;  // the largest cadence among observed layers
  std::string observed_kernels;    // their policies ("external:cudnn"), joined by ", "
};

RecordedNumerics recorded_numerics(const std::vector<AttentionLayerSpec>& layers);

// Rewrites the open question of a failed run (ChainResult::open_finding, `decide`) for the
// numerics that ran: answered (not low-precision attention) when they were fp32; the deciding
// run named as "without the fix" when a fix ran. When lpdiag ran no layer's attention, the
// missing trigger and bias say so (and how to record them) instead of the generic "no delta-error statistics".
void account_for_numerics(ChainResult& c, const RecordedNumerics& n);

}  // namespace lpdiag::analysis
