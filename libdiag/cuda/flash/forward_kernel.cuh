// FlashAttention-2 forward, bf16, one block per (128 query rows, batch x head), 8 warps of 16
// rows each, key tiles of 64 double-buffered through cp.async. The online softmax follows the
// CPU fa2 policy operation by operation (docs/reference/cuda-kernels.md says where the order differs):
// S = alpha * (Q K^T) in fp32, tile max, the fix's shift, m_new = max(m, shift),
// corr = exp(m - m_new), P-bar = exp(S - m_new), l = l * corr + sum P-bar (unrounded),
// acc = acc * corr + bf16(P-bar) V, O = bf16(acc / l), L = m + log(l).
// Level 1 ("counters") adds the repeated-max counters; level 2 ("full") adds an fp32 hp path
// (P-bar split into two bf16 terms) and the signed O error, and stores O_lp - O_hp.
#pragma once
#include <cuda_bf16.h>

#include <cmath>

#include "forward_rows.cuh"
#include "mma.cuh"
#include "params.cuh"
#include "tile_copy.cuh"

namespace lpdiag::cuda::flash {

constexpr int kFwdRows = 128;
constexpr int kFwdWarps = 8;

template <int D>
__host__ __device__ constexpr int fwd_smem_bytes() {
  return (kFwdRows * D + 4 * kBlockKeys * D) * 2 + kSmemAlign;
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
  __shared__ FwdBlockCounters blk;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m_block = Causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // long causal rows first
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int m0 = m_block * kFwdRows;
  const int N = p.N;
  const __nv_bfloat16* qg = p.q.head(b, h);
  const __nv_bfloat16* kg = p.k.head(b, h);
  const __nv_bfloat16* vg = p.v.head(b, h);

  blk.init(Level);

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
  FwdRows rows(wrow0 + lane / 4);

  std::uint32_t qf[KC][4];
  float acc[OT][4];
  float acc_lo[Level > 1 ? OT : 1][4];  // full: the lo terms' share of acc_hp = acc + acc_lo
  zero_tiles(acc);
  if constexpr (Level > 1) zero_tiles(acc_lo);
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
      // Only tiles that cross the end or this warp's causal diagonal are masked.
      const bool edge = j0 + kBlockKeys > N || (Causal && j0 + kBlockKeys - 1 > wrow0);
      float corr[2];
      rows.softmax_tile<NT, Causal, Level>(s, corr, p, j0, edge, lane, N);
      rescale_rows<OT, Level>(acc, acc_lo, corr);
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

  rows.finish<D, Level>(acc, acc_lo, p, static_cast<std::int64_t>(bh) * N, warp_live, lane, N, blk);
  flush_block_counters<Level>(blk, p.counters + h);
}

}  // namespace lpdiag::cuda::flash
