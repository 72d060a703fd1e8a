// The seed policy's forward, one thread per query row (docs/reference/cuda-kernels.md, "seed"): the
// paper's all-bf16 tile order on the CUDA cores, bit for bit the CPU emulation's. Key tiles of
// key_tile (64 ... 512) are processed in chunks of 64 keys staged in shared memory: a first
// pass forms S for the whole tile (kept as bf16 bits, which S is) and its max, a second pass
// P-bar, the row sum and P-bar V. At `full` the thread also computes the row in fp64 (plain
// running max, causal keys only) for the O error and the residual the backward needs.
#pragma once
#include "../flash/error_sums.cuh"
#include "../flash/params.cuh"
#include "lpdiag/numerics/stochastic_bf16.hpp"
#include "row_common.cuh"
#include "seed_params.cuh"

namespace lpdiag::cuda::seed {

template <int D>
constexpr int fwd_smem_bytes() {
  return kChunk * D * 4;
}

template <int D, bool Causal, int Level>
__global__ void __launch_bounds__(kChunk) seed_fwd_kernel(FwdParams p) {
  extern __shared__ float kv[];  // [kChunk][D]: a chunk of K, then of V
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int i = blockIdx.x * kChunk + threadIdx.x;
  const bool live = i < p.N;
  const int N = p.N, T = p.key_tile;
  const int nk = Causal ? i + 1 : N;  // real keys of this row
  float q[D], acc[D], part[D];
  std::uint16_t s[kMaxKeyTile];
  for (int c = 0; c < D; ++c) q[c] = live ? __bfloat162float(p.q.row(b, h, i)[c]) : 0.f, acc[c] = 0.f;
  const float neg_inf = -__int_as_float(0x7f800000);
  float m = neg_inf, l = 0.f, row_max = neg_inf;
  long long row_count = 0;
  unsigned int tile_rep = 0, pbar_one = 0;
  float logit_max = neg_inf;
  bool engaged = false;
  const bool fixed = p.fix.kind == 1 || p.fix.kind == 2;
  for (int j0 = 0; j0 < N; j0 += T) {  // every tile, causal or not (the paper's code)
    const int n = min(T, N - j0), n_real = max(0, min(n, nk - j0));
    float tm = neg_inf, rm = neg_inf;
    int tc = 0;
    for (int c0 = 0; c0 < n; c0 += kChunk) {
      __syncthreads();
      stage_rows<D>(kv, p.k, b, h, j0 + c0, N);
      __syncthreads();
      const int w = min(kChunk, n - c0);
      for (int jj = 0; jj < w; ++jj) {
        const int j = c0 + jj;
        float sv = -kBf16Max;
        if (j < n_real) {
          sv = score<D>(q, kv + jj * D, p.scale);
          if (sv > rm) rm = sv, tc = 1;
          else if (sv == rm) ++tc;
        }
        s[j] = bits_of(sv);
        tm = fmaxf(tm, sv);
      }
    }
    if (Level > 0 && n_real > 0) {
      tile_rep += tc >= 2;
      if (rm > row_max) row_max = rm, row_count = tc;
      else if (rm == row_max) row_count += tc;
      logit_max = fmaxf(logit_max, rm);
    }
    float shift = tm;
    if (fixed) {
      const float lim = bf(__fsub_rn(tm, p.fix.tol));
      int near = 0;
      for (int j = 0; j < n; ++j) near += from_bits(s[j]) >= lim;
      shift = fix_shift(p.fix, tm, near);
      engaged = engaged || fmaxf(m, shift) != fmaxf(m, tm);
    }
    const float m_new = fmaxf(m, shift);
    const float corr = m == neg_inf ? 0.f : exp_diff(p.tables, m, m_new);
    float ls = 0.f;
    for (int c = 0; c < D; ++c) part[c] = 0.f;
    for (int c0 = 0; c0 < n; c0 += kChunk) {
      __syncthreads();
      stage_rows<D>(kv, p.v, b, h, j0 + c0, N);
      __syncthreads();
      const int w = min(kChunk, n - c0);
      for (int jj = 0; jj < w; ++jj) {
        const int j = c0 + jj;
        const float pj = exp_diff(p.tables, from_bits(s[j]), m_new);
        if (Level > 0 && j < n_real) pbar_one += pj == 1.f;
        ls = __fadd_rn(ls, pj);
        if (pj == 0.f) continue;  // adds +-0 to every part: nothing (V is finite)
        const float* vr = kv + jj * D;
#pragma unroll 16
        for (int c = 0; c < D; ++c) part[c] = __fadd_rn(part[c], __fmul_rn(pj, vr[c]));
      }
    }
    l = bf(__fadd_rn(bf(__fmul_rn(l, corr)), fmaxf(bf(ls), kRowSumFloor)));
    for (int c = 0; c < D; ++c) acc[c] = bf(__fadd_rn(bf(__fmul_rn(acc[c], corr)), bf(part[c])));
    m = m_new;
  }
  // fp64, the plain running max over the row's real keys: the reference of the O error.
  double hp[D];
  if (Level == 2) hp_row<D, Causal>(kv, p.k, p.v, b, h, i, N, q, p.scale_hp, hp);
  flash::ErrorSums err;
  if (live) {
    const std::int64_t row = (std::int64_t(bh) * N + i);
    __nv_bfloat16* o = p.o.row(b, h, i);
    const bool sr = p.fix.kind == 3;
    for (int c = 0; c < D; ++c) {
      const float x = __fdiv_rn(acc[c], l);
      float out;
      if (sr) out = from_bits(sr_bf16_bits(x, sr_random_bits(p.fix.seed, std::uint64_t(row) * D + c)));
      else out = bf(x);
      o[c] = __float2bfloat16_rn(out);
      if (Level == 2) {
        const double e = double(out) - hp[c];
        err.add(e);
        p.residual[row * D + c] = float(e);
      }
    }
    p.lse[row] = bf(__fadd_rn(m, log_bf(p.tables, l)));
  }
  if (Level == 0) return;
  commit_row_counters<Level>(p.counters + h, live, row_count, row_max, engaged, tile_rep, pbar_one, logit_max, err);
}

}  // namespace lpdiag::cuda::seed
