// The seed policy's forward, one thread per query row (docs/CUDA_KERNELS.md, "seed"): the
// paper's all-bf16 tile order on the CUDA cores, bit for bit the CPU emulation's. Key tiles of
// key_tile (64 ... 512) are processed in chunks of 64 keys staged in shared memory: a first
// pass forms S for the whole tile (kept as bf16 bits, which S is) and its max, a second pass
// P-bar, the row sum and P-bar V. At `full` the thread also computes the row in fp64 (plain
// running max, causal keys only) for the O error and the residual the backward needs.
#pragma once
#include "../flash/error_sums.cuh"
#include "../flash/params.cuh"
#include "lpdiag/numerics/stochastic_bf16.hpp"
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
      if (near >= 2) {
        if (p.fix.kind == 1) {
          if (tm > 0.f) shift = __fmul_rn(p.fix.beta, tm);
          else if (tm < 0.f) shift = 0.f;
        } else {
          shift = __fadd_rn(tm, p.fix.offset);
        }
        shift = bf(shift);
        engaged = engaged || fmaxf(m, shift) != fmaxf(m, tm);
      }
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
  if (Level == 2) {
    for (int c = 0; c < D; ++c) hp[c] = 0.0;
    double hm = -__longlong_as_double(0x7ff0000000000000LL), hl = 0.0;
    // K and V of a chunk are staged one after the other, the chunk's scores kept in between.
    const int n_all = Causal ? min(N, (int)(blockIdx.x + 1) * kChunk) : N;  // the block's last row's keys
    for (int c0 = 0; c0 < n_all; c0 += kChunk) {
      double sc[kChunk];
      __syncthreads();
      stage_rows<D>(kv, p.k, b, h, c0, N);
      __syncthreads();
      double tmax = -__longlong_as_double(0x7ff0000000000000LL);
      for (int jj = 0; jj < kChunk; ++jj) {
        sc[jj] = tmax;
        if (c0 + jj >= nk) continue;
        double a = 0.0;
        for (int c = 0; c < D; ++c) a += double(q[c]) * double(kv[jj * D + c]);
        sc[jj] = a * p.scale_hp;
        tmax = fmax(tmax, sc[jj]);
      }
      __syncthreads();
      stage_rows<D>(kv, p.v, b, h, c0, N);
      __syncthreads();
      if (c0 >= nk) continue;
      const double mn = fmax(hm, tmax);
      const double cr = hm == -__longlong_as_double(0x7ff0000000000000LL) ? 0.0 : exp(hm - mn);
      hl *= cr;
      for (int c = 0; c < D; ++c) hp[c] *= cr;
      for (int jj = 0; jj < kChunk && c0 + jj < nk; ++jj) {
        const double e = exp(sc[jj] - mn);
        hl += e;
        for (int c = 0; c < D; ++c) hp[c] += e * double(kv[jj * D + c]);
      }
      hm = mn;
    }
    for (int c = 0; c < D; ++c) hp[c] /= hl;
  }
  flash::ErrorSums err;
  if (live) {
    const std::int64_t row = (std::int64_t(bh) * N + i);
    __nv_bfloat16* o = p.o + row * D;
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
  // Counters: per warp, then one lane's atomics into the head's.
  const unsigned int rows = live, rep = live && row_count >= 2, zero = rep && row_max == 0.f, eng = live && engaged;
  const unsigned int full_mask = 0xffffffffu;
  const unsigned int w_rows = __reduce_add_sync(full_mask, rows), w_rep = __reduce_add_sync(full_mask, rep),
                     w_zero = __reduce_add_sync(full_mask, zero), w_eng = __reduce_add_sync(full_mask, eng),
                     w_tile = __reduce_add_sync(full_mask, live ? tile_rep : 0u),
                     w_one = __reduce_add_sync(full_mask, live ? pbar_one : 0u),
                     w_key = __reduce_max_sync(full_mask, live ? flash::float_key(logit_max) : 0u);
  if (Level == 2) err.warp_sum();
  if ((threadIdx.x & 31) == 0) {
    DeviceHeadCounters* hc = p.counters + h;
    atomicAdd(&hc->rows, (unsigned long long)w_rows);
    atomicAdd(&hc->repeated_max_rows, (unsigned long long)w_rep);
    atomicAdd(&hc->zero_max_repeated_rows, (unsigned long long)w_zero);
    atomicAdd(&hc->fix_engaged_rows, (unsigned long long)w_eng);
    atomicAdd(&hc->tile_repeated_max_rows, (unsigned long long)w_tile);
    atomicAdd(&hc->pbar_one_entries, (unsigned long long)w_one);
    if (w_key) atomicMax(&hc->logit_max_key, w_key);
    if (Level == 2) {
      atomicAdd(&hc->o_err_sum, err.sum);
      atomicAdd(&hc->o_err_sumsq, err.sumsq);
      atomicAdd(&hc->o_err_count, (unsigned long long)err.n);
      atomicAdd(&hc->o_err_pos, (unsigned long long)err.pos);
      atomicAdd(&hc->o_err_neg, (unsigned long long)err.neg);
    }
  }
}

}  // namespace lpdiag::cuda::seed
