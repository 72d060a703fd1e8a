// `full` for the seed-mma forward: after the forward kernel, one thread per query row forms the
// row's fp64 reference (seed/row_common.cuh, the one the seed kernels use), the signed error of
// the O the forward stored, the residual O_lp - O_hp the backward's delta error needs, and adds
// the O error sums into the head's counters.
#pragma once
#include "../flash/error_sums.cuh"
#include "../seed/row_common.cuh"

namespace lpdiag::cuda::seed_mma {

template <int D>
constexpr int o_error_smem_bytes() {
  return seed::kChunk * D * 4;
}

template <int D, bool Causal>
__global__ void __launch_bounds__(seed::kChunk) seed_mma_o_error_kernel(seed::FwdParams p) {
  extern __shared__ float kv[];
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int i = blockIdx.x * seed::kChunk + threadIdx.x;
  const bool live = i < p.N;
  float q[D];
  for (int c = 0; c < D; ++c) q[c] = live ? __bfloat162float(p.q.row(b, h, i)[c]) : 0.f;
  double hp[D];
  seed::hp_row<D, Causal>(kv, p.k, p.v, b, h, i, p.N, q, p.scale_hp, hp);
  flash::ErrorSums err;
  if (live) {
    const std::int64_t row = std::int64_t(bh) * p.N + i;
    const __nv_bfloat16* o = p.o.row(b, h, i);
    for (int c = 0; c < D; ++c) {
      const double e = double(__bfloat162float(o[c])) - hp[c];
      err.add(e);
      p.residual[row * D + c] = float(e);
    }
  }
  // Only the error sums: no row is counted again (the forward counted them).
  seed::commit_row_counters<2>(p.counters + h, false, 0, 0.f, false, 0u, 0u, 0.f, err);
}

}  // namespace lpdiag::cuda::seed_mma
