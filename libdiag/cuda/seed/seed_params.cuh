// The one-thread-per-row kernels' view of one launch (seed and fp32 policies; filled by
// seed_forward.cu, seed_backward.cu, fp32_attention.cu).
#pragma once
#include <string>

#include "lpdiag/error.hpp"
#include "../flash/params.cuh"
#include "seed_math.cuh"

namespace lpdiag::cuda::seed {

using flash::FixParams;

// The shift of a tile whose max is tm when `near` of its entries pass the paper's tie test, in
// the policy's bf16 arithmetic: paper m = beta tm (tm > 0) or 0 (tm < 0), safe m = tm + offset;
// tm itself when the fix does not engage.
__device__ __forceinline__ float fix_shift(const FixParams& f, float tm, int near) {
  if (near < 2) return tm;
  float shift = tm;
  if (f.kind == 1) {
    if (tm > 0.f) shift = __fmul_rn(f.beta, tm);
    else if (tm < 0.f) shift = 0.f;
  } else {
    shift = __fadd_rn(tm, f.offset);
  }
  return bf(shift);
}

struct FwdParams {
  View q, k, v;
  flash::OutView o;
  float* lse;        // (B, H, N)
  float* residual;   // full: O_lp - O_hp, fp32 (B, H, N, d)
  DeviceHeadCounters* counters;
  Tables tables;
  int H, N, key_tile;
  float scale;
  double scale_hp;  // full: the fp64 reference's alpha (1/sqrt(d) in fp64, as the CPU's hp)
  FixParams fix;
};

struct BwdParams {
  View q, k, v, o, dout;
  const float* lse;
  const float* residual;  // full only
  float* delta;           // (B, H, N)
  flash::OutView dq, dk, dv;
  DeviceHeadCounters* counters;  // full only: the delta errors
  Tables tables;
  int H, N, key_tile, query_tile;
  float scale;
  FixParams fix;  // fp32: the forward's, with which the delta kernel recomputes O
};

// A public BF16View as the kernels read it (any strides; d contiguous).
inline View view_of(const BF16View& v, const char* name) {
  if (!v.ptr) throw Error(std::string("seed attention: ") + name + " is null");
  return {static_cast<const __nv_bfloat16*>(v.ptr), v.sb, v.sh, v.sn};
}

}  // namespace lpdiag::cuda::seed
