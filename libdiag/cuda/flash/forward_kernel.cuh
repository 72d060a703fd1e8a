// FlashAttention-2 forward, bf16, one block per (128 query rows, batch x head), 8 warps of 16
// rows each, key tiles of 64 double-buffered through cp.async. The online softmax follows the
// CPU fa2 policy operation by operation (docs/CUDA_KERNELS.md says where the order differs):
// S = alpha * (Q K^T) in fp32, tile max, the fix's shift, m_new = max(m, shift),
// corr = exp(m - m_new), P-bar = exp(S - m_new), l = l * corr + sum P-bar (unrounded),
// acc = acc * corr + bf16(P-bar) V, O = bf16(acc / l), L = m + log(l).
// Level 1 ("counters") adds the repeated-max counters; level 2 ("full") adds an fp32 hp path
// (P-bar split into two bf16 terms) and the signed O error, and stores O_lp - O_hp.
#pragma once
#include <cuda_bf16.h>

#include <cmath>

#include "error_sums.cuh"
#include "mma.cuh"
#include "params.cuh"

namespace lpdiag::cuda::flash {

constexpr int kFwdRows = 128;
constexpr int kFwdWarps = 8;

template <int D>
__host__ __device__ constexpr int fwd_smem_bytes() {
  return (kFwdRows * D + 4 * kBlockKeys * D) * 2 + kSmemAlign;
}

// Copies `rows` rows of a (N x D) bf16 head into a swizzled shared tile; rows past n are zeros.
template <int D, int Rows, int Threads>
__device__ __forceinline__ void load_tile(__nv_bfloat16* dst, const __nv_bfloat16* src, std::int64_t sn, int row0,
                                          int n) {
  constexpr int kChunks = Rows * D / 8;
  static_assert(kChunks % Threads == 0, "tile copy must divide evenly among threads");
#pragma unroll
  for (int x = 0; x < kChunks / Threads; ++x) {
    const int idx = threadIdx.x + x * Threads;
    const int r = idx / (D / 8), c = (idx % (D / 8)) * 8;
    const int gr = row0 + r;
    const bool ok = gr < n;
    const __nv_bfloat16* g = src + (ok ? gr : 0) * sn + c;
    cp_async16(smem_addr(dst + swz<D>(r, c)), g, ok ? 16 : 0);
  }
}

// Blocks per SM the compiler must leave room for: at d = 64 two blocks of 8 warps fit when the
// registers stay <= 128 (ncu: 132 registers allowed one block, 12.5% occupancy).
template <int D, int Level>
__host__ __device__ constexpr int fwd_min_blocks() {
  return D == 64 && Level < 2 ? 2 : 1;
}

template <int D, bool Causal, int Level>
__global__ void __launch_bounds__(kFwdWarps * 32, fwd_min_blocks<D, Level>()) flash_fwd_kernel(FwdParams p) {
  constexpr int NT = kBlockKeys / 8;  // S n-tiles per key tile
  constexpr int OT = D / 8;           // O n-tiles
  constexpr int KC = D / 16;          // k-chunks of the QK^T product
  constexpr std::uint32_t kRowD = D * 2;  // bytes per shared row
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto* qs = reinterpret_cast<__nv_bfloat16*>(align_smem(smem_raw));
  // Stage s of the key (value) tile lives at ks + s * kStage (vs + s * kStage).
  constexpr int kStage = kBlockKeys * D;
  __nv_bfloat16* ks = qs + kFwdRows * D;
  __nv_bfloat16* vs = ks + 2 * kStage;
  __shared__ unsigned long long cnt_s[6];
  __shared__ BlockErrorSums err_s;
  __shared__ unsigned int lmax_s;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m_block = Causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // long causal rows first
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int m0 = m_block * kFwdRows;
  const int N = p.N;
  const __nv_bfloat16* qg = p.q.head(b, h);
  const __nv_bfloat16* kg = p.k.head(b, h);
  const __nv_bfloat16* vg = p.v.head(b, h);

  if (Level > 0 && threadIdx.x < 6) cnt_s[threadIdx.x] = 0;
  if (Level > 1 && threadIdx.x == 0) err_s.clear();
  if (Level > 0 && threadIdx.x == 0) lmax_s = 0;

  const int key_end = Causal ? min(N, m0 + kFwdRows) : N;
  const int n_tiles = (key_end + kBlockKeys - 1) / kBlockKeys;

  load_tile<D, kFwdRows, kFwdWarps * 32>(qs, qg, p.q.sn, m0, N);
  load_tile<D, kBlockKeys, kFwdWarps * 32>(ks, kg, p.k.sn, 0, N);
  load_tile<D, kBlockKeys, kFwdWarps * 32>(vs, vg, p.v.sn, 0, N);
  cp_async_commit();

  // This lane's fragment addresses (LaneFrag): K's stage 0 as the B operand of S, V's as the
  // (transposed) B operand of P-bar V.
  const LaneFrag<D> fd(lane);
  const std::uint32_t k_nk = smem_addr(ks) + fd.b_nk;
  const std::uint32_t v_kn = smem_addr(vs) + fd.b_kn;

  const int wrow0 = m0 + warp * 16;
  const int row[2] = {wrow0 + lane / 4, wrow0 + lane / 4 + 8};
  const float neg_inf = -INFINITY;

  std::uint32_t qf[KC][4];
  float acc[OT][4];
  float acc_lo[Level > 1 ? OT : 1][4];  // full: the lo terms' share of acc_hp = acc + acc_lo
  zero_tiles(acc);
  if constexpr (Level > 1) zero_tiles(acc_lo);
  float m[2] = {neg_inf, neg_inf}, l[2] = {0.f, 0.f};
  // Counter state per row (every lane of the row's quad holds the same values).
  float row_max[2] = {neg_inf, neg_inf};
  int row_count[2] = {0, 0};
  bool engaged[2] = {false, false};
  unsigned int tile_rep = 0, pbar_one = 0;
  const bool warp_live = wrow0 < N;

  for (int t = 0; t < n_tiles; ++t) {
    const int j0 = t * kBlockKeys;
    if (t + 1 < n_tiles) {
      load_tile<D, kBlockKeys, kFwdWarps * 32>(ks + ((t + 1) & 1) * kStage, kg, p.k.sn, j0 + kBlockKeys, N);
      load_tile<D, kBlockKeys, kFwdWarps * 32>(vs + ((t + 1) & 1) * kStage, vg, p.v.sn, j0 + kBlockKeys, N);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if (t == 0) {
#pragma unroll
      for (int kc = 0; kc < KC; ++kc)
        ldmatrix_x4(qf[kc], chunk_xor(smem_addr(qs) + warp * 16 * kRowD + fd.a, kc));
    }
    // A warp skips tiles entirely above its rows (causal) and does nothing past the end.
    if (warp_live && (!Causal || j0 <= wrow0)) {
      const std::uint32_t stage = (t & 1) * kStage * 2;
      const std::uint32_t k_nk_t = k_nk + stage, v_kn_t = v_kn + stage;
      float s[NT][4];
      zero_tiles(s);
#pragma unroll
      for (int kc = 0; kc < KC; ++kc) {
        const std::uint32_t b_addr = chunk_xor(k_nk_t, kc);
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          std::uint32_t bfr[4];
          ldmatrix_x4(bfr, b_addr + np * 16 * kRowD);
          mma_bf16_pair(s, np, qf[kc], bfr);
        }
      }
      // Scale and mask (only tiles that cross the end or this warp's causal diagonal); the
      // tile max and, for the counters and the fix, how often it occurs.
      const bool edge = j0 + kBlockKeys > N || (Causal && j0 + kBlockKeys - 1 > wrow0);
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
      int tc[2] = {0, 0}, near[2] = {0, 0};
      if constexpr (Level > 0) {
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) tc[e / 2] += s[n][e] == tm[e / 2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          tc[r] += __shfl_xor_sync(0xffffffffu, tc[r], 1);
          tc[r] += __shfl_xor_sync(0xffffffffu, tc[r], 2);
        }
      }
      if (p.fix.kind != 0) {
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
      float m_new[2], corr[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if constexpr (Level > 0) {
          tile_rep += (lane % 4 == 0) && tc[r] >= 2 && row[r] < N;
          if (tm[r] > row_max[r]) row_max[r] = tm[r], row_count[r] = tc[r];
          else if (tm[r] == row_max[r]) row_count[r] += tc[r];
        }
        float shift = tm[r];
        if (p.fix.kind != 0 && near[r] >= 2) {
          if (p.fix.kind == 1) shift = tm[r] > 0.f ? __fmul_rn(p.fix.beta, tm[r]) : (tm[r] < 0.f ? 0.f : tm[r]);
          else shift = __fadd_rn(tm[r], p.fix.offset);
          engaged[r] = engaged[r] || fmaxf(m[r], shift) != fmaxf(m[r], tm[r]);
        }
        m_new[r] = fmaxf(m[r], shift);
        corr[r] = m[r] == neg_inf ? 0.f : expf(__fsub_rn(m[r], m_new[r]));
        m[r] = m_new[r];
        l[r] = __fmul_rn(l[r], corr[r]);
      }
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pe = expf(__fsub_rn(s[n][e], m_new[e / 2]));
          s[n][e] = pe;
          if constexpr (Level > 0) pbar_one += pe == 1.f && row[e / 2] < N;
        }
      // The row sum in this lane's key order; the quad's four partial sums meet at the end.
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) l[e / 2] = __fadd_rn(l[e / 2], s[n][e]);
      // The rescale, skipped when no row of the warp moved its max (x * 1 = x exactly).
      if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
        for (int t2 = 0; t2 < OT; ++t2)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            acc[t2][e] = __fmul_rn(acc[t2][e], corr[e / 2]);
            if constexpr (Level > 1) acc_lo[t2][e] = __fmul_rn(acc_lo[t2][e], corr[e / 2]);
          }
      }
      // acc += bf16(P-bar) V; at full also acc_lo += lo V, with P-bar = hi + lo to ~2^-17 and
      // hi = bf16(P-bar): the hp accumulator is acc + acc_lo, one extra MMA instead of two.
#pragma unroll
      for (int kc = 0; kc < kBlockKeys / 16; ++kc) {
        std::uint32_t a[4], lo[4];
        c_to_a(a, s, kc);
        if constexpr (Level > 1) c_to_a_residual(lo, s, kc);
#pragma unroll
        for (int np = 0; np < OT / 2; ++np) {
          std::uint32_t bfr[4];
          ldmatrix_x4_trans(bfr, chunk_xor(v_kn_t, np) + kc * 16 * kRowD);
          mma_bf16_pair(acc, np, a, bfr);
          if constexpr (Level > 1) {
            mma_bf16_pair(acc_lo, np, lo, bfr);
          }
        }
      }
    }
    __syncthreads();
  }

  // Epilogue: the quad's row sums, O, L, the counters and (full) the O errors.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = __fadd_rn(l[r], __shfl_xor_sync(0xffffffffu, l[r], 1));
    l[r] = __fadd_rn(l[r], __shfl_xor_sync(0xffffffffu, l[r], 2));
  }
  const std::int64_t head_off = static_cast<std::int64_t>(bh) * N;
  ErrorSums err;
  if (warp_live) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (row[r] >= N) continue;
      __nv_bfloat16* orow = p.o + (head_off + row[r]) * D;
#pragma unroll
      for (int t2 = 0; t2 < OT; ++t2) {
        const int c = t2 * 8 + 2 * (lane % 4);
        const float o0 = __fdiv_rn(acc[t2][2 * r], l[r]), o1 = __fdiv_rn(acc[t2][2 * r + 1], l[r]);
        const std::uint32_t packed = pack_bf16(o0, o1);
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
    float logit_max = neg_inf;  // the max over tiles of the tile max is row_max
    if (warp_live && lane % 4 == 0) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (row[r] >= N) continue;
        rows += 1;
        rep += row_count[r] >= 2;
        zrep += row_count[r] >= 2 && row_max[r] == 0.f;
        eng += engaged[r];
        logit_max = fmaxf(logit_max, row_max[r]);
      }
    }
    unsigned int vals[6] = {rows, rep, tile_rep, zrep, pbar_one, eng};
#pragma unroll
    for (int f = 0; f < 6; ++f) {
#pragma unroll
      for (int off = 16; off > 0; off /= 2) vals[f] += __shfl_xor_sync(0xffffffffu, vals[f], off);
    }
    for (int off = 16; off > 0; off /= 2) logit_max = fmaxf(logit_max, __shfl_xor_sync(0xffffffffu, logit_max, off));
    if (lane == 0) {
#pragma unroll
      for (int f = 0; f < 6; ++f) atomicAdd(&cnt_s[f], static_cast<unsigned long long>(vals[f]));
      if (warp_live) atomicMax(&lmax_s, float_key(logit_max));
    }
  }
  if constexpr (Level > 1) {
    err.warp_sum();
    if (lane == 0) err_s.add(err);
  }
  if constexpr (Level > 0) {
    __syncthreads();
    if (threadIdx.x == 0) {
      DeviceHeadCounters* c = p.counters + h;
      atomicAdd(&c->rows, cnt_s[0]);
      atomicAdd(&c->repeated_max_rows, cnt_s[1]);
      atomicAdd(&c->tile_repeated_max_rows, cnt_s[2]);
      atomicAdd(&c->zero_max_repeated_rows, cnt_s[3]);
      atomicAdd(&c->pbar_one_entries, cnt_s[4]);
      atomicAdd(&c->fix_engaged_rows, cnt_s[5]);
      atomicMax(&c->logit_max_key, lmax_s);
      if constexpr (Level > 1) {
        err_s.flush(&c->o_err_sum, &c->o_err_sumsq, &c->o_err_count, &c->o_err_pos, &c->o_err_neg);
      }
    }
  }
}

}  // namespace lpdiag::cuda::flash
