// What the one-thread-per-row kernels (the seed and fp32 policies) share: the fp64 reference row
// of the O error, and the per-row counters added into the head's.
#pragma once
#include "../flash/error_sums.cuh"
#include "../flash/params.cuh"
#include "seed_math.cuh"

namespace lpdiag::cuda::seed {

// O_hp of query row i (fp64, the plain running max over the row's real keys, chunk by chunk).
// Every thread of the block calls it (it stages K and V in `kv`, [kChunk][D]).
template <int D, bool Causal>
__device__ void hp_row(float* kv, const View& K, const View& V, int b, int h, int i, int N, const float* q, double scale_hp,
                       double* hp) {
  const int nk = Causal ? i + 1 : N;
  for (int c = 0; c < D; ++c) hp[c] = 0.0;
  const double neg_inf = -__longlong_as_double(0x7ff0000000000000LL);
  double hm = neg_inf, hl = 0.0;
  // K and V of a chunk are staged one after the other, the chunk's scores kept in between.
  const int n_all = Causal ? min(N, (int)(blockIdx.x + 1) * kChunk) : N;  // the block's last row's keys
  for (int c0 = 0; c0 < n_all; c0 += kChunk) {
    double sc[kChunk];
    __syncthreads();
    stage_rows<D>(kv, K, b, h, c0, N);
    __syncthreads();
    double tmax = neg_inf;
    for (int jj = 0; jj < kChunk; ++jj) {
      sc[jj] = tmax;
      if (c0 + jj >= nk) continue;
      double a = 0.0;
      for (int c = 0; c < D; ++c) a += double(q[c]) * double(kv[jj * D + c]);
      sc[jj] = a * scale_hp;
      tmax = fmax(tmax, sc[jj]);
    }
    __syncthreads();
    stage_rows<D>(kv, V, b, h, c0, N);
    __syncthreads();
    if (c0 >= nk) continue;
    const double mn = fmax(hm, tmax);
    const double cr = hm == neg_inf ? 0.0 : exp(hm - mn);
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

// A row's counters, summed per warp, then one lane's atomics into the head's. Every thread of
// the warp calls it (`live`: the row exists).
template <int Level>
__device__ void commit_row_counters(DeviceHeadCounters* hc, bool live, long long row_count, float row_max, bool engaged,
                                    unsigned int tile_rep, unsigned int pbar_one, float logit_max, flash::ErrorSums& err) {
  const unsigned int rows = live, rep = live && row_count >= 2, zero = rep && row_max == 0.f, eng = live && engaged;
  const unsigned int full_mask = 0xffffffffu;
  const unsigned int w_rows = __reduce_add_sync(full_mask, rows), w_rep = __reduce_add_sync(full_mask, rep),
                     w_zero = __reduce_add_sync(full_mask, zero), w_eng = __reduce_add_sync(full_mask, eng),
                     w_tile = __reduce_add_sync(full_mask, live ? tile_rep : 0u),
                     w_one = __reduce_add_sync(full_mask, live ? pbar_one : 0u),
                     w_key = __reduce_max_sync(full_mask, live ? flash::float_key(logit_max) : 0u);
  if (Level == 2) err.warp_sum();
  if ((threadIdx.x & 31) == 0) {
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

// The delta error sums of a warp into the head's.
__device__ __forceinline__ void commit_delta_errors(DeviceHeadCounters* hc, flash::ErrorSums& err) {
  err.warp_sum();
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&hc->delta_err_sum, err.sum);
    atomicAdd(&hc->delta_err_sumsq, err.sumsq);
    atomicAdd(&hc->delta_err_count, (unsigned long long)err.n);
    atomicAdd(&hc->delta_err_pos, (unsigned long long)err.pos);
    atomicAdd(&hc->delta_err_neg, (unsigned long long)err.neg);
  }
}

}  // namespace lpdiag::cuda::seed
