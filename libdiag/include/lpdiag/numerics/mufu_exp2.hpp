// The H200's MUFU ex2 (PTX ex2.approx.ftz.f32), bit for bit, for arguments <= 0: the softmax's
// range. Measured with tests/cuda/mma_probe.cu (--ex2-table) and confirmed on 2^21 random
// arguments (docs/reference/attention-numerics.md, "The MUFU exp"):
//   |x| is truncated to a multiple of 2^-23, giving x_q = n + f (n = floor(x_q), 0 <= f < 1);
//   the result is T[f 2^23] 2^n, with T a fixed table of 2^23 values in [1, 2) (stored as its
//   difference from the correctly rounded 2^f, -2 .. +1 ulps); results below 2^-126 flush to 0.
#pragma once

namespace lpdiag {

// 2^x as ex2.approx.ftz.f32 computes it, for x <= 0 (and -inf); x > 0 or NaN: the correctly
// rounded 2^x (the MUFU was not measured there).
float mufu_exp2(float x);

}  // namespace lpdiag
