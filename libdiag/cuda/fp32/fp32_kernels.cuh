// The fp32 policy (the counterfactual: attention in fp32 from bf16 inputs) on the CUDA cores,
// one thread per query row (forward, delta, dQ) or key (dK, dV), bit for bit the CPU engine's
// order (tiled_head.hpp, Mode::fp32; docs/reference/attention-numerics.md): every dot product over the
// feature index from 0, explicit round-to-nearest operations (no FMA contraction), exp and log
// from numerics/exp_log_fp32.hpp (the same code on host and device), key tiles of key_tile
// keys (64 ... 512) staged 64 at a time. O leaves the kernel rounded to bf16 once; the delta
// kernel recomputes the row's fp32 O, which the CPU's delta is formed from. The backward's sums
// run over every key (dQ) or query (dK, dV) in ascending order, as the CPU's do.
#pragma once
#include "../seed/row_common.cuh"
#include "../seed/seed_params.cuh"
#include "lpdiag/numerics/exp_log_fp32.hpp"
#include "lpdiag/numerics/stochastic_bf16.hpp"

namespace lpdiag::cuda::fp32 {

using seed::BwdParams;
using seed::FwdParams;
using seed::kChunk;
using seed::stage_rows;
using seed::View;

__device__ __forceinline__ float exp_diff(float a, float b) { return exp_fp32(__fsub_rn(a, b)); }

template <int D>
__device__ __forceinline__ float score(const float* q, const float* k, float alpha) {
  return __fmul_rn(alpha, seed::dot<D>(q, k));
}

// What a row's forward leaves besides its accumulator.
struct RowState {
  float m, l, row_max, logit_max;
  long long row_count;
  unsigned int tile_rep, pbar_one;
  bool engaged;
};

// Row i's forward: acc = the unnormalized O, st.m and st.l. Every thread of the block calls it
// (the block stages K and V chunks in kv for the keys of its last row); a row past N computes
// on zeros and is not stored.
template <int D, bool Causal, bool Count>
__device__ void forward_row(float* kv, const View& K, const View& V, int b, int h, int i, int N, int T, float alpha,
                            const seed::FixParams& fix, const float* q, float* acc, RowState& st) {
  const float neg_inf = -__int_as_float(0x7f800000);
  const int nk = Causal ? min(i + 1, N) : N;
  const int n_block = Causal ? min(N, (int)(blockIdx.x + 1) * kChunk) : N;
  float s[seed::kMaxKeyTile];
  float m = neg_inf, l = 0.f;
  st = RowState{neg_inf, 0.f, neg_inf, neg_inf, 0, 0u, 0u, false};
  for (int c = 0; c < D; ++c) acc[c] = 0.f;
  const bool fixed = fix.kind == 1 || fix.kind == 2;
  for (int j0 = 0; j0 < n_block; j0 += T) {
    const int n = max(0, min(T, nk - j0));  // this row's keys in the tile
    const int w_tile = min(T, n_block - j0);
    float tm = neg_inf;
    for (int c0 = 0; c0 < w_tile; c0 += kChunk) {
      __syncthreads();
      stage_rows<D>(kv, K, b, h, j0 + c0, N);
      __syncthreads();
      for (int jj = 0; jj < kChunk && c0 + jj < n; ++jj) {
        const float sv = score<D>(q, kv + jj * D, alpha);
        s[c0 + jj] = sv;
        tm = fmaxf(tm, sv);
      }
    }
    if (n > 0 && Count) {
      int tc = 0;
      for (int j = 0; j < n; ++j) tc += s[j] == tm;
      st.tile_rep += tc >= 2;
      if (tm > st.row_max) st.row_max = tm, st.row_count = tc;
      else if (tm == st.row_max) st.row_count += tc;
      st.logit_max = fmaxf(st.logit_max, tm);
    }
    float shift = tm;
    if (fixed && n > 0) {
      int near = 0;
      for (int j = 0; j < n; ++j) near += __fsub_rn(tm, s[j]) <= fix.tol;
      if (near >= 2) {
        if (fix.kind == 1) {
          if (tm > 0.f) shift = __fmul_rn(fix.beta, tm);
          else if (tm < 0.f) shift = 0.f;
        } else {
          shift = __fadd_rn(tm, fix.offset);
        }
        st.engaged = st.engaged || fmaxf(m, shift) != fmaxf(m, tm);
      }
    }
    const float m_new = fmaxf(m, shift);
    const float corr = m == neg_inf ? 0.f : exp_diff(m, m_new);
    if (n > 0) {
      l = __fmul_rn(l, corr);
      for (int c = 0; c < D; ++c) acc[c] = __fmul_rn(acc[c], corr);
    }
    for (int c0 = 0; c0 < w_tile; c0 += kChunk) {
      __syncthreads();
      stage_rows<D>(kv, V, b, h, j0 + c0, N);
      __syncthreads();
      for (int jj = 0; jj < kChunk && c0 + jj < n; ++jj) {
        const float pj = exp_diff(s[c0 + jj], m_new);
        if (Count) st.pbar_one += pj == 1.f;
        l = __fadd_rn(l, pj);
        const float* vr = kv + jj * D;
#pragma unroll 16
        for (int c = 0; c < D; ++c) acc[c] = __fadd_rn(acc[c], __fmul_rn(pj, vr[c]));
      }
    }
    if (n > 0) m = m_new;
  }
  st.m = m, st.l = l;
}

// O_ic as the CPU's fp32 policy leaves it: a_c / l, or stochastically rounded to bf16 (fix sr).
__device__ __forceinline__ float out_value(float a, float l, const seed::FixParams& fix, std::int64_t element) {
  const float x = __fdiv_rn(a, l);
  if (fix.kind != 3) return x;
  return seed::from_bits(sr_bf16_bits(x, sr_random_bits(fix.seed, std::uint64_t(element))));
}

template <int D>
constexpr int fwd_smem_bytes() {
  return kChunk * D * 4;
}

template <int D, bool Causal, int Level>
__global__ void __launch_bounds__(kChunk) fp32_fwd_kernel(FwdParams p) {
  extern __shared__ float kv[];
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int i = blockIdx.x * kChunk + threadIdx.x;
  const bool live = i < p.N;
  float q[D], acc[D];
  for (int c = 0; c < D; ++c) q[c] = live ? __bfloat162float(p.q.row(b, h, i)[c]) : 0.f;
  RowState st;
  forward_row<D, Causal, (Level > 0)>(kv, p.k, p.v, b, h, i, p.N, p.key_tile, p.scale, p.fix, q, acc, st);
  double hp[D];
  if (Level == 2) seed::hp_row<D, Causal>(kv, p.k, p.v, b, h, i, p.N, q, p.scale_hp, hp);
  flash::ErrorSums err;
  if (live) {
    const std::int64_t row = std::int64_t(bh) * p.N + i;
    for (int c = 0; c < D; ++c) {
      const float out = out_value(acc[c], st.l, p.fix, row * D + c);
      p.o.row(b, h, i)[c] = __float2bfloat16_rn(out);
      if (Level == 2) {
        const double e = double(out) - hp[c];
        err.add(e);
        p.residual[row * D + c] = float(e);
      }
    }
    p.lse[row] = __fadd_rn(st.m, log_fp32(st.l));
  }
  if (Level == 0) return;
  seed::commit_row_counters<Level>(p.counters + h, live, st.row_count, st.row_max, st.engaged, st.tile_rep, st.pbar_one,
                                   st.logit_max, err);
}

// delta_i = sum_c dO_ic O_ic in fp32 from the row's fp32 O (recomputed); at `full` also the
// delta error against the fp64 delta of O_hp = O - residual.
template <int D, bool Causal, int Level>
__global__ void __launch_bounds__(kChunk) fp32_delta_kernel(BwdParams p) {
  extern __shared__ float kv[];
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int i = blockIdx.x * kChunk + threadIdx.x;
  const bool live = i < p.N;
  float q[D], acc[D];
  for (int c = 0; c < D; ++c) q[c] = live ? __bfloat162float(p.q.row(b, h, i)[c]) : 0.f;
  RowState st;
  seed::FixParams fix = p.fix;
  forward_row<D, Causal, false>(kv, p.k, p.v, b, h, i, p.N, p.key_tile, p.scale, fix, q, acc, st);
  flash::ErrorSums err;
  if (live) {
    const std::int64_t row = std::int64_t(bh) * p.N + i;
    const __nv_bfloat16* g = p.dout.row(b, h, i);
    float delta = 0.f;
    double hp = 0.0;
    for (int c = 0; c < D; ++c) {
      const float gc = __bfloat162float(g[c]), oc = out_value(acc[c], st.l, fix, row * D + c);
      delta = __fadd_rn(delta, __fmul_rn(gc, oc));
      if (Level == 2) hp += double(gc) * (double(oc) - double(p.residual[row * D + c]));
    }
    p.delta[row] = delta;
    if (Level == 2) err.add(double(delta) - hp);
  }
  if (Level == 2) seed::commit_delta_errors(p.counters + h, err);
}

// P_ij and dS_ij = P_ij (dP_ij - delta_i) in fp32.
struct PairGrad {
  float p, ds;
};
template <int D>
__device__ __forceinline__ PairGrad pair_grad(const float* q, const float* k, const float* g, const float* v, float lse, float delta,
                                              float alpha) {
  const float pr = exp_diff(score<D>(q, k, alpha), lse);
  return {pr, __fmul_rn(pr, __fsub_rn(seed::dot<D>(g, v), delta))};
}

template <int D>
constexpr int dkdv_smem_bytes() {
  return 2 * kChunk * D * 4 + 2 * kChunk * 4;  // Q and dO rows, their L and delta
}

// dK_j = alpha sum_i dS_ij q_i, dV_j = sum_i P_ij dO_i, i ascending (causal: i >= j).
template <int D, bool Causal>
__global__ void __launch_bounds__(kChunk) fp32_dkdv_kernel(BwdParams p) {
  extern __shared__ float sm[];
  float *qs = sm, *gs = sm + kChunk * D, *ls = gs + kChunk * D, *ds_ = ls + kChunk;
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int j = blockIdx.x * kChunk + threadIdx.x;
  const bool live = j < p.N;
  const int N = p.N;
  float k[D], v[D], dk[D], dv[D];
  for (int c = 0; c < D; ++c) {
    k[c] = live ? __bfloat162float(p.k.row(b, h, j)[c]) : 0.f;
    v[c] = live ? __bfloat162float(p.v.row(b, h, j)[c]) : 0.f;
    dk[c] = dv[c] = 0.f;
  }
  const std::int64_t base = std::int64_t(bh) * N;
  for (int r0 = Causal ? blockIdx.x * kChunk : 0; r0 < N; r0 += kChunk) {
    __syncthreads();
    stage_rows<D>(qs, p.q, b, h, r0, N);
    stage_rows<D>(gs, p.dout, b, h, r0, N);
    for (int r = threadIdx.x; r < kChunk; r += blockDim.x) {
      ls[r] = r0 + r < N ? p.lse[base + r0 + r] : 0.f;
      ds_[r] = r0 + r < N ? p.delta[base + r0 + r] : 0.f;
    }
    __syncthreads();
    for (int rr = 0; rr < kChunk && r0 + rr < N; ++rr) {
      if (Causal && j > r0 + rr) continue;
      const float *qi = qs + rr * D, *gi = gs + rr * D;
      const PairGrad pg = pair_grad<D>(qi, k, gi, v, ls[rr], ds_[rr], p.scale);
#pragma unroll 16
      for (int c = 0; c < D; ++c) {
        dv[c] = __fadd_rn(dv[c], __fmul_rn(pg.p, gi[c]));
        dk[c] = __fadd_rn(dk[c], __fmul_rn(pg.ds, qi[c]));
      }
    }
  }
  if (!live) return;
  for (int c = 0; c < D; ++c) {
    p.dk.row(b, h, j)[c] = __float2bfloat16_rn(__fmul_rn(p.scale, dk[c]));
    p.dv.row(b, h, j)[c] = __float2bfloat16_rn(dv[c]);
  }
}

template <int D>
constexpr int dq_smem_bytes() {
  return 2 * kChunk * D * 4;  // K and V rows
}

// dQ_i = alpha sum_j dS_ij k_j, j ascending (causal: j <= i).
template <int D, bool Causal>
__global__ void __launch_bounds__(kChunk) fp32_dq_kernel(BwdParams p) {
  extern __shared__ float sm[];
  float *ks = sm, *vs = sm + kChunk * D;
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int i = blockIdx.x * kChunk + threadIdx.x;
  const bool live = i < p.N;
  const int N = p.N;
  const std::int64_t base = std::int64_t(bh) * N;
  float q[D], g[D], dq[D];
  for (int c = 0; c < D; ++c) {
    q[c] = live ? __bfloat162float(p.q.row(b, h, i)[c]) : 0.f;
    g[c] = live ? __bfloat162float(p.dout.row(b, h, i)[c]) : 0.f;
    dq[c] = 0.f;
  }
  const float lse = live ? p.lse[base + i] : 0.f, delta = live ? p.delta[base + i] : 0.f;
  const int kmax = Causal ? min(N, (int)(blockIdx.x + 1) * kChunk) : N;
  const int nk = Causal ? i + 1 : N;
  for (int c0 = 0; c0 < kmax; c0 += kChunk) {
    __syncthreads();
    stage_rows<D>(ks, p.k, b, h, c0, N);
    stage_rows<D>(vs, p.v, b, h, c0, N);
    __syncthreads();
    for (int jj = 0; jj < kChunk && c0 + jj < min(kmax, nk); ++jj) {
      const PairGrad pg = pair_grad<D>(q, ks + jj * D, g, vs + jj * D, lse, delta, p.scale);
#pragma unroll 16
      for (int c = 0; c < D; ++c) dq[c] = __fadd_rn(dq[c], __fmul_rn(pg.ds, ks[jj * D + c]));
    }
  }
  if (!live) return;
  for (int c = 0; c < D; ++c) p.dq.row(b, h, i)[c] = __float2bfloat16_rn(__fmul_rn(p.scale, dq[c]));
}

}  // namespace lpdiag::cuda::fp32
