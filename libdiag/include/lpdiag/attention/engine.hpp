// The attention engine on the CPU: a tiled FlashAttention-2 emulation for each declared policy,
// bit-exact to the order of operations in docs/reference/attention-numerics.md, instrumented against an
// hp run (the same algorithm in fp64, nothing rounded) on the same inputs.
#pragma once
#include <cstdint>
#include <vector>

#include "lpdiag/attention/attention_config.hpp"
#include "lpdiag/stats/error_accumulator.hpp"
#include "lpdiag/trace/head_counters.hpp"

namespace lpdiag {

struct AttentionOptions {
  bool backward = true;
  // Compute the hp path and the O / delta errors. Without it only the counters that need no
  // reference (repeated maxima, P==1 entries, fix engagement, logit max) are filled.
  bool instrument = true;
  int threads = 0;  // 0: hardware concurrency
  // Keep the fp64 reference (o_hp, delta_hp) in the run, to judge other outputs of the same
  // inputs (output_errors) or to round it once (correctly_rounded_output). Needs instrument.
  bool keep_reference = false;
};

// Inputs [B, H, N, d] row-major; values should be exact in bf16 (the engine does not round them).
struct AttentionInputs {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* dout = nullptr;  // required when backward
  std::int64_t B = 0, H = 0, N = 0, d = 0;
};

struct AttentionRun {
  std::vector<float> o, lse, dq, dk, dv;  // the policy's outputs; lse [B,H,N]
  std::vector<HeadCounters> heads;        // H entries, summed over the batch
  ErrorAccumulator o_err;                 // every element of O_lp - O_hp
  ErrorAccumulator delta_err;             // every row of delta_lp - delta_hp
  std::vector<ErrorAccumulator> o_err_by_column;  // d entries: O error per feature column
  std::int64_t nan_count = 0;             // non-finite values in o, lse, dq, dk, dv
  std::vector<double> o_hp, delta_hp;     // keep_reference only: the fp64 reference [B,H,N,d], [B,H,N]
  std::int64_t d = 0;                     // head dim of o (for per-column statistics)
};

// The errors of any output O of the same inputs (a GPU kernel's, a recorded one, the correctly
// rounded one) against a run's kept reference: O - O_hp per element and per column, and
// delta - delta_hp with delta = rowsum(dO .* O) formed as a backward forms it (fp32, column
// order). o: [B,H,N,d] bf16 values as floats; dout may be null (no delta errors).
struct OutputErrors {
  ErrorAccumulator o_err, delta_err;
  std::vector<ErrorAccumulator> o_err_by_column;
  std::int64_t nan_count = 0;
};
OutputErrors output_errors(const AttentionRun& reference, const float* o, const float* dout);

// O_hp rounded once to bf16 (nearest-even): the best any kernel with a bf16 output can do.
std::vector<float> correctly_rounded_output(const AttentionRun& reference);

AttentionRun run_attention(const AttentionConfig& cfg, const AttentionInputs& in, const AttentionOptions& opt = {});

}  // namespace lpdiag
