// What the backward kernels (mma.sync and wgmma) share per thread: the epilogue of the thread's
// two key rows (key[0], key[1]). Their dK and dV accumulators are in an mma.sync C fragment's
// layout: element e of n8 tile t is key key[e / 2], column 8 t + 2 (lane % 4) + (e % 2).
// (The per-element P and dS step stays a lambda in each kernel: moved into a shared function,
// nvcc compiled the causal mma.sync backward differently, and there is no device time to measure
// that.)
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "mma.cuh"
#include "params.cuh"

namespace lpdiag::cuda::flash {

// dK = alpha dK_acc and dV as bf16 into the thread's two key rows (those below N).
template <int D>
__device__ __forceinline__ void store_key_grads(const BwdParams& p, const float (&dk)[D / 8][4], const float (&dv)[D / 8][4],
                                                const int (&key)[2], std::int64_t head_off, int lane, int N) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = key[r];
    if (j >= N) continue;
#pragma unroll
    for (int t = 0; t < D / 8; ++t) {
      const int c = t * 8 + 2 * (lane % 4);
      *reinterpret_cast<std::uint32_t*>(p.dk + (head_off + j) * D + c) =
          pack_bf16(__fmul_rn(p.scale, dk[t][2 * r]), __fmul_rn(p.scale, dk[t][2 * r + 1]));
      *reinterpret_cast<std::uint32_t*>(p.dv + (head_off + j) * D + c) = pack_bf16(dv[t][2 * r], dv[t][2 * r + 1]);
    }
  }
}

}  // namespace lpdiag::cuda::flash
