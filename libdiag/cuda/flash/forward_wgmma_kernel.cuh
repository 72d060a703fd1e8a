// FlashAttention-2 forward on Hopper's warpgroup MMA (sm_90a), same numerics and counters as
// forward_kernel.cuh (the shared per-row code is forward_rows.cuh): one block per (Rows query
// rows, batch x head), Rows / 64 warpgroups of 64 rows, key tiles of 64 double-buffered through
// cp.async. Each warpgroup overlaps tile t's softmax with the previous tile's P-bar V: it issues
// S_t = Q K_t^T and P-bar_{t-1} V_{t-1}, waits for S_t only, and rescales O once P-bar V is done
// (the same operations on O in the same order as the plain loop). S = Q K^T reads Q and K
// from shared memory (no fragment loads, no Q registers); P-bar V takes bf16(P-bar) from
// registers and V from shared memory. Tiles are stored as 64-column panels with the 128-byte
// swizzle (wgmma.cuh). Every warpgroup multiplies every tile of the block (causal: the lower
// one's last tile is wasted work); a warp whose rows all lie above the tile adds P-bar = 0.
#pragma once
#include <cuda_bf16.h>

#include <cmath>

#include "forward_rows.cuh"
#include "mma.cuh"
#include "params.cuh"
#include "tile_copy.cuh"
#include "wgmma.cuh"

namespace lpdiag::cuda::flash {

// Query rows per block: 128 (two warpgroups of 64 sharing each K/V tile) or 64 (one warpgroup
// per block; blocks on one SM then drift apart, so one's MMAs overlap another's softmax). Key
// tiles stay at kBlockKeys = 64: the tile-repeat counter is defined on the fa2 policy's 64-key
// tiles (a 128-key tile counted 70 where the CPU counts 140).
template <int D>
__host__ __device__ constexpr int fwd_wgmma_smem_bytes(int rows) {
  return (rows * D + 4 * kBlockKeys * D) * 2 + kSmemAlign;
}

// Blocks per SM the registers are sized for (at most 65536 / (threads x blocks) each).
template <int D, int Level, int Rows>
__host__ __device__ constexpr int fwd_wgmma_min_blocks() {
  if (Rows == 128) return D == 64 && Level < 2 ? 2 : 1;
  return D == 64 && Level < 2 ? 3 : 2;
}

template <int D, bool Causal, int Level, int Rows>
__global__ void __launch_bounds__(2 * Rows, (fwd_wgmma_min_blocks<D, Level, Rows>())) flash_fwd_wgmma_kernel(FwdParams p) {
  constexpr int kThreads = 2 * Rows;
  constexpr int NT = kBlockKeys / 8;  // S n-tiles per key tile
  constexpr int OT = D / 8;           // O n-tiles
  constexpr int KC = D / 16;          // k16 steps of Q K^T
  constexpr int PK = kBlockKeys / 16;  // k16 steps of P-bar V
  constexpr std::uint32_t kPanelRow = wg::kPanelRow;
  constexpr std::uint32_t kQPanel = Rows * kPanelRow;  // bytes per Q panel
  constexpr std::uint32_t kKvPanel = kBlockKeys * kPanelRow;
  constexpr int kStage = kBlockKeys * D;  // elements per K (V) stage
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto* qs = reinterpret_cast<__nv_bfloat16*>(align_smem(smem_raw));
  __nv_bfloat16* ks = qs + Rows * D;
  __nv_bfloat16* vs = ks + 2 * kStage;
  __shared__ FwdBlockCounters blk;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = warp / 4;
  const int m_block = Causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // long causal rows first
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int m0 = m_block * Rows;
  const int N = p.N;
  const __nv_bfloat16* qg = p.q.head(b, h);
  const __nv_bfloat16* kg = p.k.head(b, h);
  const __nv_bfloat16* vg = p.v.head(b, h);

  blk.init(Level);

  const int key_end = Causal ? min(N, m0 + Rows) : N;
  const int n_tiles = (key_end + kBlockKeys - 1) / kBlockKeys;

  // Loads run one tile ahead: Q and K_0 first; at tile t, K_{t+1} and V_t (V_t is first used
  // at tile t + 1, by the P-bar V that overlaps S_{t+1}'s softmax).
  load_panels<D, Rows, kThreads>(qs, qg, p.q.sn, m0, N);
  load_panels<D, kBlockKeys, kThreads>(ks, kg, p.k.sn, 0, N);
  cp_async_commit();

  const int wrow0 = m0 + warp * 16;
  FwdRows rows(wrow0 + lane / 4);
  float acc[OT][4];
  float acc_lo[Level > 1 ? OT : 1][4];  // full: the lo terms' share of acc_hp = acc + acc_lo
  zero_tiles(acc);
  if constexpr (Level > 1) zero_tiles(acc_lo);
  const bool warp_live = wrow0 < N;
  const std::uint32_t q_wg = smem_addr(qs) + wg * 64 * kPanelRow;
  // bf16(P-bar) of the previous tile (and at full its residual), waiting for its P-bar V.
  std::uint32_t a[PK][4], lo[Level > 1 ? PK : 1][4];
  // acc += bf16(P-bar) V with V at shared address v_t (at full also acc_lo += lo V), V N-major.
  auto issue_pv = [&](std::uint32_t v_t) {
#pragma unroll
    for (int kc = 0; kc < PK; ++kc) {
      const std::uint64_t dv = wg::desc_sw128(v_t + kc * 16 * kPanelRow, kKvPanel);
      wg::rs_pv<D>(acc, a[kc], dv);
      if constexpr (Level > 1) wg::rs_pv<D>(acc_lo, lo[kc], dv);
    }
    wg::commit();
  };
  // Every warpgroup issues every MMA of the block's tiles (a warp above a causal tile adds
  // P-bar = 0): branches on thread-dependent values around in-flight wgmma make ptxas serialize
  // them (C7520). The branches below depend on the tile index only.
  for (int t = 0; t < n_tiles; ++t) {
    const int j0 = t * kBlockKeys;
    if (t + 1 < n_tiles) load_panels<D, kBlockKeys, kThreads>(ks + ((t + 1) & 1) * kStage, kg, p.k.sn, j0 + kBlockKeys, N);
    load_panels<D, kBlockKeys, kThreads>(vs + (t & 1) * kStage, vg, p.v.sn, j0, N);
    cp_async_commit();
    cp_async_wait<1>();       // K_t and V_{t-1} are in
    wg::fence_proxy_async();  // this thread's cp.async data, visible to wgmma after the barrier
    __syncthreads();
    float s[NT][4];
    zero_tiles(s);
    wg::fence_operand(s);
    wg::fence_operand(acc);
    wg::fence_operand(a);
    if constexpr (Level > 1) wg::fence_operand(acc_lo), wg::fence_operand(lo);
    wg::fence();
    {  // S_t = Q K_t^T
      const std::uint32_t k_t = smem_addr(ks + (t & 1) * kStage);
#pragma unroll
      for (int kc = 0; kc < KC; ++kc) {
        const std::uint32_t in_panel = (kc % 4) * 32;
        wg::ss<kBlockKeys, 0, 0>(s, wg::desc_sw128(q_wg + (kc / 4) * kQPanel + in_panel, 16),
                                 wg::desc_sw128(k_t + (kc / 4) * kKvPanel + in_panel, 16));
      }
      wg::commit();
    }
    if (t > 0) {  // P-bar_{t-1} V_{t-1}
      issue_pv(smem_addr(vs + ((t - 1) & 1) * kStage));
      wg::wait<1>();  // S_t is in; P-bar V may still run
    } else {
      wg::wait<0>();
    }
    wg::fence_operand(s);
    // This warp's rows: the online softmax, or P-bar = 0 when the tile lies above them all.
    float corr[2] = {1.f, 1.f};
    const bool softmax = warp_live && (!Causal || j0 <= wrow0);
    if (softmax) {
      const bool edge = j0 + kBlockKeys > N || (Causal && j0 + kBlockKeys - 1 > wrow0);
      rows.softmax_tile<NT, Causal, Level>(s, corr, p, j0, edge, lane, N);
    }
    wg::wait<0>();
    wg::fence_operand(acc);
    wg::fence_operand(a);
    if constexpr (Level > 1) wg::fence_operand(acc_lo), wg::fence_operand(lo);
    if (softmax) {
      rescale_rows<OT, Level>(acc, acc_lo, corr);
#pragma unroll
      for (int kc = 0; kc < PK; ++kc) {
        c_to_a(a[kc], s, kc);
        if constexpr (Level > 1) c_to_a_residual(lo[kc], s, kc);
      }
    } else {
#pragma unroll
      for (int kc = 0; kc < PK; ++kc)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          a[kc][x] = 0u;
          if constexpr (Level > 1) lo[kc][x] = 0u;
        }
    }
    __syncthreads();  // K_t and V_{t-1} are free for the next tile's loads
  }
  // The last tile's P-bar V.
  cp_async_wait<0>();
  wg::fence_proxy_async();
  __syncthreads();
  {
    const std::uint32_t v_t = smem_addr(vs + ((n_tiles - 1) & 1) * kStage);
    wg::fence_operand(acc);
    wg::fence_operand(a);
    if constexpr (Level > 1) wg::fence_operand(acc_lo), wg::fence_operand(lo);
    wg::fence();
    issue_pv(v_t);
    wg::wait<0>();
    wg::fence_operand(acc);
    if constexpr (Level > 1) wg::fence_operand(acc_lo);
  }

  rows.finish<D, Level>(acc, acc_lo, p, static_cast<std::int64_t>(bh) * N, warp_live, lane, N, blk);
  flush_block_counters<Level>(blk, p.counters + h);
}

}  // namespace lpdiag::cuda::flash
