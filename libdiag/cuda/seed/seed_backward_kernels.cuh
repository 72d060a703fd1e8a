// The seed policy's backward on the CUDA cores, bit for bit the CPU emulation's order
// (tiled_head.hpp, backward_head with Mode::seed):
//  - delta_i = bf16(sum_c bf16(dO_ic O_ic)), one thread per row; at `full` also the delta error
//    against the fp64 delta of the forward's fp64 O (O_lp minus the residual);
//  - dK, dV, one thread per key j: over query tiles of query_tile rows in order, a fp32 partial
//    over the tile's rows (ascending), then dV_j = bf16(dV_j + bf16(partial)), likewise dK_j;
//  - dQ, one thread per row i: over key tiles of key_tile keys in order (causal: up to the end of
//    the row's query tile, keys j <= i), a fp32 partial, then dQ_i = bf16(dQ_i + bf16(partial)).
// P and dS are recomputed in both kernels from the same inputs, identically.
#pragma once
#include "../flash/error_sums.cuh"
#include "row_common.cuh"
#include "seed_params.cuh"

namespace lpdiag::cuda::seed {

template <int D, int Level>
__global__ void __launch_bounds__(kChunk) seed_delta_kernel(BwdParams p) {
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int i = blockIdx.x * kChunk + threadIdx.x;
  flash::ErrorSums err;
  if (i < p.N) {
    const std::int64_t row = std::int64_t(bh) * p.N + i;
    const __nv_bfloat16 *g = p.dout.row(b, h, i), *o = p.o.row(b, h, i);
    float acc = 0.f;
    double hp = 0.0;
    for (int c = 0; c < D; ++c) {
      const float gc = __bfloat162float(g[c]), oc = __bfloat162float(o[c]);
      acc = __fadd_rn(acc, bf(__fmul_rn(gc, oc)));
      if (Level == 2) hp += double(gc) * (double(oc) - double(p.residual[row * D + c]));
    }
    p.delta[row] = bf(acc);
    if (Level == 2) err.add(double(bf(acc)) - hp);
  }
  if (Level == 2) commit_delta_errors(p.counters + h, err);
}

template <int D>
constexpr int dkdv_smem_bytes() {
  return 2 * kChunk * D * 4 + 2 * kChunk * 4;  // Q and dO rows, their L and delta
}

template <int D, bool Causal>
__global__ void __launch_bounds__(kChunk) seed_dkdv_kernel(BwdParams p) {
  extern __shared__ float sm[];
  float *qs = sm, *gs = sm + kChunk * D, *ls = gs + kChunk * D, *ds_ = ls + kChunk;
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int j = blockIdx.x * kChunk + threadIdx.x;
  const bool live = j < p.N;
  const int N = p.N, Br = p.query_tile;
  float k[D], v[D], dk[D], dv[D], pk[D], pv[D];
  for (int c = 0; c < D; ++c) {
    k[c] = live ? __bfloat162float(p.k.row(b, h, j)[c]) : 0.f;
    v[c] = live ? __bfloat162float(p.v.row(b, h, j)[c]) : 0.f;
    dk[c] = dv[c] = 0.f;
  }
  const std::int64_t base = std::int64_t(bh) * N;
  // Causal: rows before the block's first key contribute nothing to any of its keys.
  const int first_tile = Causal ? (blockIdx.x * kChunk) / Br * Br : 0;
  for (int i0 = first_tile; i0 < N; i0 += Br) {
    const int i1 = min(N, i0 + Br);
    bool any = false;
    for (int c = 0; c < D; ++c) pk[c] = pv[c] = 0.f;
    for (int r0 = i0; r0 < i1; r0 += kChunk) {
      __syncthreads();
      stage_rows<D>(qs, p.q, b, h, r0, N);
      stage_rows<D>(gs, p.dout, b, h, r0, N);
      for (int r = threadIdx.x; r < kChunk; r += blockDim.x) {
        ls[r] = r0 + r < N ? p.lse[base + r0 + r] : 0.f;
        ds_[r] = r0 + r < N ? p.delta[base + r0 + r] : 0.f;
      }
      __syncthreads();
      const int w = min(kChunk, i1 - r0);
      for (int rr = 0; rr < w; ++rr) {
        const int i = r0 + rr;
        if (Causal && j > i) continue;
        const float* qi = qs + rr * D;
        const float* gi = gs + rr * D;
        const PairGrad pg = pair_grad<D>(p.tables, qi, k, gi, v, ls[rr], ds_[rr], p.scale);
        any = true;
#pragma unroll 16
        for (int c = 0; c < D; ++c) {
          pv[c] = __fadd_rn(pv[c], __fmul_rn(pg.p, gi[c]));
          pk[c] = __fadd_rn(pk[c], __fmul_rn(pg.ds, qi[c]));
        }
      }
    }
    if (any)
      for (int c = 0; c < D; ++c) dv[c] = bf(__fadd_rn(dv[c], bf(pv[c]))), dk[c] = bf(__fadd_rn(dk[c], bf(pk[c])));
  }
  if (!live) return;
  for (int c = 0; c < D; ++c) {
    p.dk.row(b, h, j)[c] = __float2bfloat16_rn(dk[c]);
    p.dv.row(b, h, j)[c] = __float2bfloat16_rn(dv[c]);
  }
}

template <int D>
constexpr int dq_smem_bytes() {
  return 2 * kChunk * D * 4;  // K and V rows
}

template <int D, bool Causal>
__global__ void __launch_bounds__(kChunk) seed_dq_kernel(BwdParams p) {
  extern __shared__ float sm[];
  float *ks = sm, *vs = sm + kChunk * D;
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int i = blockIdx.x * kChunk + threadIdx.x;
  const bool live = i < p.N;
  const int N = p.N, Bc = p.key_tile;
  const std::int64_t base = std::int64_t(bh) * N;
  float q[D], g[D], dq[D], part[D];
  for (int c = 0; c < D; ++c) {
    q[c] = live ? __bfloat162float(p.q.row(b, h, i)[c]) : 0.f;
    g[c] = live ? __bfloat162float(p.dout.row(b, h, i)[c]) : 0.f;
    dq[c] = 0.f;
  }
  const float lse = live ? p.lse[base + i] : 0.f, delta = live ? p.delta[base + i] : 0.f;
  // Causal: key tiles up to the end of the block's last row (uniform over the block).
  const int kmax = Causal ? min(N, (int)(blockIdx.x + 1) * kChunk) : N;
  for (int j0 = 0; j0 < kmax; j0 += Bc) {
    const int j1b = min(kmax, j0 + Bc);
    // The CPU's limit for this row: keys j <= i (its query tile's end is past i + 1).
    const int j1 = Causal ? min(j1b, i + 1) : j1b;
    for (int c = 0; c < D; ++c) part[c] = 0.f;
    for (int c0 = j0; c0 < j1b; c0 += kChunk) {
      __syncthreads();
      stage_rows<D>(ks, p.k, b, h, c0, N);
      stage_rows<D>(vs, p.v, b, h, c0, N);
      __syncthreads();
      const int w = min(kChunk, j1b - c0);
      for (int jj = 0; jj < w; ++jj) {
        if (c0 + jj >= j1) break;
        const PairGrad pg = pair_grad<D>(p.tables, q, ks + jj * D, g, vs + jj * D, lse, delta, p.scale);
#pragma unroll 16
        for (int c = 0; c < D; ++c) part[c] = __fadd_rn(part[c], __fmul_rn(pg.ds, ks[jj * D + c]));
      }
    }
    if (j1 > j0)
      for (int c = 0; c < D; ++c) dq[c] = bf(__fadd_rn(dq[c], bf(part[c])));
  }
  if (!live) return;
  for (int c = 0; c < D; ++c) p.dq.row(b, h, i)[c] = __float2bfloat16_rn(dq[c]);
}

}  // namespace lpdiag::cuda::seed
