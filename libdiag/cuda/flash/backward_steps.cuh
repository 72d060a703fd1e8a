// The per-thread steps both backward kernels (mma.sync and wgmma) share: P and dS from S^T and
// dP^T, and the epilogue of the thread's two key rows (key[0], key[1]). Both work on mma.sync C
// fragments, the layout wgmma's accumulators share.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "mma.cuh"
#include "params.cuh"

namespace lpdiag::cuda::flash {

// L log2 e and delta of query rows i0 .. i0 + Br - 1 into shared memory (0 past N), by the
// block's first Br threads. lse_g and delta_g point at the head's row 0.
template <int Br>
__device__ __forceinline__ void stage_row_stats(float* lse_s, float* delta_s, const float* lse_g, const float* delta_g, int i0,
                                                int N) {
  if (threadIdx.x < Br) {
    const int i = i0 + threadIdx.x;
    lse_s[threadIdx.x] = i < N ? lse_g[i] * kLog2e : 0.f;
    delta_s[threadIdx.x] = i < N ? delta_g[i] : 0.f;
  }
}

// P^T and dS^T in place, over the thread's S^T and dP^T (element e of n8 tile n: key key[e / 2],
// query i0 + 8 n + 2 (lane % 4) + (e % 2)): P = 2^(S alpha log2 e - L log2 e) by one FFMA and
// the MUFU exp, as FA2 (lt: the tile's L log2 e per query; the backward is compared with the CPU
// in norm, not bit for bit), dS = P (dP - delta) (dt: the tile's delta per query). Called with
// std::true_type where the tile crosses the sequence's end or the causal diagonal: zero there.
// It holds references to the kernel's variables, as a [&] lambda would (a function taking them
// as parameters compiled to different code for the causal mma.sync backward).
template <int ST, bool Causal>
struct SoftmaxGrad {
  float (&s)[ST][4];
  float (&dp)[ST][4];
  const float* const& lt;
  const float* const& dt;
  const float& scale_log2;
  const int& lane;
  const int& i0;
  const int (&key)[2];
  const int& N;

  template <class Masked>
  __device__ __forceinline__ void operator()(Masked) const {
#pragma unroll
    for (int n = 0; n < ST; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int il = n * 8 + 2 * (lane % 4) + (e & 1);
        float pe = exp2_approx(fmaf(s[n][e], scale_log2, -lt[il]));
        if constexpr (Masked::value) {
          const int i = i0 + il, j = key[e / 2];
          if (!(i < N && j < N && (!Causal || j <= i))) pe = 0.f;
        }
        s[n][e] = pe;
        dp[n][e] = pe * (dp[n][e] - dt[il]);
      }
  }
};

// dK = alpha dK_acc and dV as bf16 into the thread's two key rows (those below N).
template <int D>
__device__ __forceinline__ void store_key_grads(const BwdParams& p, const float (&dk)[D / 8][4], const float (&dv)[D / 8][4],
                                                const int (&key)[2], std::int64_t head_off, int lane, int N) {
  const int bh = static_cast<int>(head_off / N), b = bh / p.H, h = bh % p.H;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = key[r];
    if (j >= N) continue;
    __nv_bfloat16 *dk_row = p.dk.row(b, h, j), *dv_row = p.dv.row(b, h, j);
#pragma unroll
    for (int t = 0; t < D / 8; ++t) {
      const int c = t * 8 + 2 * (lane % 4);
      *reinterpret_cast<std::uint32_t*>(dk_row + c) = pack_bf16(__fmul_rn(p.scale, dk[t][2 * r]), __fmul_rn(p.scale, dk[t][2 * r + 1]));
      *reinterpret_cast<std::uint32_t*>(dv_row + c) = pack_bf16(dv[t][2 * r], dv[t][2 * r + 1]);
    }
  }
}

}  // namespace lpdiag::cuda::flash
