// A CPU model of one tensor-core multiply-accumulate step, d = c + sum_k a_k b_k over bf16 a, b
// and an fp32 c, as mma.sync m16n8k16 and wgmma m64nNk16 compute it on NVIDIA GPUs
// (docs/reference/attention-numerics.md, "The MMA model", gives the rules and the probe that confirmed
// them on the H200). The products are exact; the step does not add them one at a time in fp32.
// Instead every group of `group` products is summed together with the running value in one
// fixed-point frame aligned to the largest exponent among them: each term keeps only the bits
// down to 2^(e_max - frame_bits + 1) (the rest truncated), the kept parts are added exactly,
// and the sum is rounded once to fp32 (toward zero on the hardware).
#pragma once
#include <cstdint>

namespace lpdiag {

struct MmaModel {
  int group = 16;           // products fused per step with the running value (16 = one k16 instruction)
  int frame_bits = 26;      // significand bits of the aligned frame, counting the leading bit of e_max
  bool truncate_toward_zero = true;   // aligned terms: sign-magnitude truncation (else toward -inf)
  bool round_nearest = false;         // the normalised sum to fp32: nearest-even (else toward zero)
  // A product's exponent for the alignment: e(a) + e(b), its significand in [1, 4) (else the
  // product's own exponent, significand in [1, 2)).
  bool product_exp_from_inputs = true;
};

// The model the H200's tensor cores were measured to follow (mma.sync and wgmma alike).
const MmaModel& hopper_mma_model();

// c + sum_{k < n} a[k] b[k] under the model; a and b hold bf16 values as floats. Non-finite
// inputs give the IEEE result of the plain sum (Inf or NaN); inputs that are not bf16 values
// (outside the model) give the exact sum rounded once to fp32.
float mma_accumulate(float c, const float* a, const float* b, int n, const MmaModel& m = hopper_mma_model());

}  // namespace lpdiag
