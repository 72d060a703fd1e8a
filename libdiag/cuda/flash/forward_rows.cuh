// What the forward kernels (mma.sync and wgmma) share per thread: the online softmax of one key
// tile over the thread's two rows, in the CPU fa2 policy's operations (S = alpha (Q K^T) in
// fp32, tile max, the fix's shift, m_new = max(m, shift), corr = exp(m - m_new), P-bar =
// exp(S - m_new), l = l * corr + sum P-bar unrounded), the repeated-max counters, the O
// rescale, and the epilogue (O = bf16(acc / l), L = m + log l, the counters, the O errors).
// The sr fix rounds O stochastically (the same bits as the CPU's); the shifts are kinds 1 and 2.
// exp is FA2's MUFU exp (exp_mufu): exact at 0 and -inf, so P-bar = 1 exactly where S equals the
// max, and elsewhere within a few fp32 ulps of the CPU's std::exp, which can flip bf16(P-bar).
// The thread's rows and columns are those of an mma.sync C fragment, which wgmma's accumulator
// shares: element e of n8 tile n is row row[e / 2], key j0 + 8 n + 2 (lane % 4) + (e % 2).
// The counters cost about 4 instructions per logit on top of the softmax's 7 or so; how each is
// counted is the form that measured fastest (docs/results/performance.md).
#pragma once
#include <cuda_bf16.h>

#include <cmath>

#include "error_sums.cuh"
#include "lpdiag/numerics/stochastic_bf16.hpp"
#include "mma.cuh"
#include "params.cuh"

namespace lpdiag::cuda::flash {

// One block's counters before they go to the per-head device counters (shared memory).
struct FwdBlockCounters {
  unsigned long long cnt[6];  // rows, repeated, tile repeats, zero-max repeats, P-bar == 1, fix engaged
  BlockErrorSums err;
  unsigned int lmax;
  __device__ void init(int level) {
    if (level > 0 && threadIdx.x < 6) cnt[threadIdx.x] = 0;
    if (level > 1 && threadIdx.x == 0) err.clear();
    if (level > 0 && threadIdx.x == 0) lmax = 0;
  }
};

// c += 1 where a == b: a compare and a predicated add (as C++, ptxas makes it a compare, an add
// and a select, and the adds one chain).
__device__ __forceinline__ void count_equal(unsigned int& c, float a, float b) {
  asm("{\n .reg .pred p;\n setp.eq.f32 p, %1, %2;\n @p add.u32 %0, %0, 1;\n}" : "+r"(c) : "f"(a), "f"(b));
}

struct FwdRows {
  int row[2];
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  // Counter state per row (every lane of the row's quad holds the same values).
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_count[2] = {0.f, 0.f};  // counts in fp32 (exact below 2^24): no conversions
  bool engaged[2] = {false, false};
  unsigned int tile_rep = 0;
  unsigned int pbar_one[2][2] = {};  // by row and key parity (four short chains); rows >= N masked in finish

  __device__ explicit FwdRows(int row0) : row{row0, row0 + 8} {}

  // s: this thread's raw Q K^T products of the tile starting at key j0; becomes P-bar. corr: what
  // the O accumulators must be multiplied by. edge: the tile crosses the end or the diagonal.
  template <int NT, bool Causal, int Level>
  __device__ __forceinline__ void softmax_tile(float (&s)[NT][4], float (&corr)[2], const FwdParams& p, int j0, bool edge,
                                               int lane, int N) {
    const float neg_inf = -INFINITY;
    float tm[2] = {neg_inf, neg_inf};
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + n * 8 + 2 * (lane % 4) + (e & 1);
        const int r = e / 2;
        float v = __fmul_rn(p.scale, s[n][e]);
        if (edge && (j >= N || (Causal && j > row[r]))) v = neg_inf;
        s[n][e] = v;
        tm[r] = fmaxf(tm[r], v);
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tm[r] = fmaxf(tm[r], __shfl_xor_sync(0xffffffffu, tm[r], 1));
      tm[r] = fmaxf(tm[r], __shfl_xor_sync(0xffffffffu, tm[r], 2));
    }
    // How often the tile max occurs (the counters) and how many logits lie within the fix's
    // tolerance of it (the fix's trigger): each only where it is used.
    float tc[2] = {0.f, 0.f};
    int near[2] = {0, 0};
    if constexpr (Level > 0) {
      float c[4] = {0.f, 0.f, 0.f, 0.f};  // by element: a 1.0 or 0.0 per compare and an add
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) c[e] += s[n][e] == tm[e / 2] ? 1.f : 0.f;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        tc[r] = c[2 * r] + c[2 * r + 1];
        tc[r] += __shfl_xor_sync(0xffffffffu, tc[r], 1);
        tc[r] += __shfl_xor_sync(0xffffffffu, tc[r], 2);
      }
    }
    if (p.fix.kind == 1 || p.fix.kind == 2) {
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) near[e / 2] += __fsub_rn(tm[e / 2], s[n][e]) <= p.fix.tol;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        near[r] += __shfl_xor_sync(0xffffffffu, near[r], 1);
        near[r] += __shfl_xor_sync(0xffffffffu, near[r], 2);
      }
    }
    float m_new[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if constexpr (Level > 0) {
        tile_rep += (lane % 4 == 0) && tc[r] >= 2.f && row[r] < N;
        if (tm[r] > row_max[r]) row_max[r] = tm[r], row_count[r] = tc[r];
        else if (tm[r] == row_max[r]) row_count[r] += tc[r];
      }
      float shift = tm[r];
      if ((p.fix.kind == 1 || p.fix.kind == 2) && near[r] >= 2) {
        if (p.fix.kind == 1) shift = tm[r] > 0.f ? __fmul_rn(p.fix.beta, tm[r]) : (tm[r] < 0.f ? 0.f : tm[r]);
        else shift = __fadd_rn(tm[r], p.fix.offset);
        engaged[r] = engaged[r] || fmaxf(m[r], shift) != fmaxf(m[r], tm[r]);
      }
      m_new[r] = fmaxf(m[r], shift);
      corr[r] = m[r] == neg_inf ? 0.f : exp_mufu(__fsub_rn(m[r], m_new[r]));
      m[r] = m_new[r];
      l[r] = __fmul_rn(l[r], corr[r]);
    }
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pe = exp_mufu(__fsub_rn(s[n][e], m_new[e / 2]));
        s[n][e] = pe;
        if constexpr (Level > 0) count_equal(pbar_one[e / 2][e & 1], pe, 1.f);
      }
    // The row sum in this lane's key order; the quad's four partial sums meet at the end.
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) l[e / 2] = __fadd_rn(l[e / 2], s[n][e]);
  }

  // O = bf16(acc / l), L = m + log l for this thread's live rows; at full, O - O_hp with O_hp =
  // (acc + acc_lo) / l into the residual and the error sums; the counters into the block's.
  template <int D, int Level>
  __device__ __forceinline__ void finish(const float (&acc)[D / 8][4], const float (&acc_lo)[Level > 1 ? D / 8 : 1][4],
                                         const FwdParams& p, std::int64_t head_off, bool warp_live, int lane, int N,
                                         FwdBlockCounters& blk) {
    constexpr int OT = D / 8;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] = __fadd_rn(l[r], __shfl_xor_sync(0xffffffffu, l[r], 1));
      l[r] = __fadd_rn(l[r], __shfl_xor_sync(0xffffffffu, l[r], 2));
    }
    ErrorSums err;
    if (warp_live) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (row[r] >= N) continue;
        const int bh = static_cast<int>(head_off / N);
        __nv_bfloat16* orow = p.o.row(bh / p.H, bh % p.H, row[r]);
#pragma unroll
        for (int t2 = 0; t2 < OT; ++t2) {
          const int c = t2 * 8 + 2 * (lane % 4);
          const float o0 = __fdiv_rn(acc[t2][2 * r], l[r]), o1 = __fdiv_rn(acc[t2][2 * r + 1], l[r]);
          std::uint32_t packed;
          if (p.fix.kind == 3) {  // sr: stochastic rounding, the CPU emulation's bits (stochastic_bf16.hpp)
            const std::uint64_t idx = static_cast<std::uint64_t>((head_off + row[r]) * D + c);
            packed = static_cast<std::uint32_t>(sr_bf16_bits(o0, sr_random_bits(p.fix.seed, idx))) |
                     static_cast<std::uint32_t>(sr_bf16_bits(o1, sr_random_bits(p.fix.seed, idx + 1))) << 16;
          } else {
            packed = pack_bf16(o0, o1);
          }
          *reinterpret_cast<std::uint32_t*>(orow + c) = packed;
          if constexpr (Level > 1) {
            const __nv_bfloat162 ob = *reinterpret_cast<const __nv_bfloat162*>(&packed);
            const float e0 = __low2float(ob) - (acc[t2][2 * r] + acc_lo[t2][2 * r]) / l[r];
            const float e1 = __high2float(ob) - (acc[t2][2 * r + 1] + acc_lo[t2][2 * r + 1]) / l[r];
            *reinterpret_cast<float2*>(p.residual + (head_off + row[r]) * D + c) = make_float2(e0, e1);
            err.add(e0);
            err.add(e1);
          }
        }
        if (lane % 4 == 0) p.lse[head_off + row[r]] = __fadd_rn(m[r], logf(l[r]));
      }
    }
    if constexpr (Level > 0) {
      unsigned int rows = 0, rep = 0, zrep = 0, eng = 0;
      float logit_max = -INFINITY;  // the max over tiles of the tile max is row_max
      if (warp_live && lane % 4 == 0) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (row[r] >= N) continue;
          rows += 1;
          rep += row_count[r] >= 2.f;
          zrep += row_count[r] >= 2.f && row_max[r] == 0.f;
          eng += engaged[r];
          logit_max = fmaxf(logit_max, row_max[r]);
        }
      }
      unsigned int pbar = 0;
#pragma unroll
      for (int r = 0; r < 2; ++r) pbar += row[r] < N ? pbar_one[r][0] + pbar_one[r][1] : 0u;
      // Warp sums by redux.sync. rows, rep, zrep and eng are at most 2 per lane and 16 per warp:
      // four 8-bit fields of one sum. The logit max as its order-preserving key (0 below all).
      const unsigned int small = __reduce_add_sync(0xffffffffu, rows | rep << 8 | zrep << 16 | eng << 24);
      const unsigned int tiles = __reduce_add_sync(0xffffffffu, tile_rep);
      const unsigned int ones = __reduce_add_sync(0xffffffffu, pbar);
      const unsigned int lkey = __reduce_max_sync(0xffffffffu, warp_live && lane % 4 == 0 ? float_key(logit_max) : 0u);
      if (lane == 0) {
        const unsigned int vals[6] = {small & 0xffu, (small >> 8) & 0xffu, tiles, (small >> 16) & 0xffu, ones, small >> 24};
#pragma unroll
        for (int f = 0; f < 6; ++f)
          if (vals[f] != 0) atomicAdd(&blk.cnt[f], static_cast<unsigned long long>(vals[f]));
        if (warp_live) atomicMax(&blk.lmax, lkey);
      }
    }
    if constexpr (Level > 1) {
      err.warp_sum();
      if (lane == 0) blk.err.add(err);
    }
  }
};

// The rescale of the O accumulators, skipped when no row of the warp moved its max (x * 1 = x
// exactly).
template <int OT, int Level>
__device__ __forceinline__ void rescale_rows(float (&acc)[OT][4], float (&acc_lo)[Level > 1 ? OT : 1][4],
                                             const float (&corr)[2]) {
  if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
    for (int t2 = 0; t2 < OT; ++t2)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[t2][e] = __fmul_rn(acc[t2][e], corr[e / 2]);
        if constexpr (Level > 1) acc_lo[t2][e] = __fmul_rn(acc_lo[t2][e], corr[e / 2]);
      }
  }
}

// After every thread's finish: one set of 64-bit atomics per block into the head's counters.
template <int Level>
__device__ __forceinline__ void flush_block_counters(FwdBlockCounters& blk, DeviceHeadCounters* c) {
  if constexpr (Level > 0) {
    __syncthreads();
    if (threadIdx.x == 0) {
      atomicAdd(&c->rows, blk.cnt[0]);
      atomicAdd(&c->repeated_max_rows, blk.cnt[1]);
      atomicAdd(&c->tile_repeated_max_rows, blk.cnt[2]);
      atomicAdd(&c->zero_max_repeated_rows, blk.cnt[3]);
      atomicAdd(&c->pbar_one_entries, blk.cnt[4]);
      atomicAdd(&c->fix_engaged_rows, blk.cnt[5]);
      atomicMax(&c->logit_max_key, blk.lmax);
      if constexpr (Level > 1) blk.err.flush(&c->o_err_sum, &c->o_err_sumsq, &c->o_err_count, &c->o_err_pos, &c->o_err_neg);
    }
  }
}

}  // namespace lpdiag::cuda::flash
