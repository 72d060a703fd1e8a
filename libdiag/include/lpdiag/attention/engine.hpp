// The attention engine on the CPU: a tiled FlashAttention-2 emulation for each declared policy,
// bit-exact to the order of operations in docs/ATTENTION_NUMERICS.md, instrumented against an
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
};

AttentionRun run_attention(const AttentionConfig& cfg, const AttentionInputs& in, const AttentionOptions& opt = {});

}  // namespace lpdiag
