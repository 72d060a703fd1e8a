// FlashAttention-2 backward on Hopper's warpgroup MMA (sm_90a), the same operations as
// backward_kernel.cuh: one block per (Keys = 128 or 64 keys, batch x head), a warpgroup per 64 keys,
// query tiles of 64 rows double-buffered through cp.async, all tiles as 64-column panels with
// the 128-byte swizzle (wgmma.cuh). Per tile and warpgroup: S^T = K Q^T and dP^T = V dO^T from
// shared memory; P and dS in fp32 registers (P by one FFMA and ex2.approx); dV += bf16(P)^T dO
// and dK += bf16(dS)^T Q with A from registers and dO, Q N-major; bf16(dS)^T to shared memory;
// dQ = dS K (A M-major, B N-major) split between two warpgroups by columns of d at d = 128, else
// by keys, added into the fp32 buffer by vector atomics.
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <type_traits>

#include "backward_steps.cuh"
#include "forward_wgmma_kernel.cuh"
#include "mma.cuh"
#include "params.cuh"
#include "wgmma.cuh"

namespace lpdiag::cuda::flash {

constexpr int kWgBwdRows = 64;  // query rows per tile

// Keys per block: 128 (two warpgroups of 64) or 64 (one warpgroup; two blocks per SM).
template <int D>
__host__ __device__ constexpr int bwd_wgmma_smem_bytes(int keys) {
  return (2 * keys * D + 4 * kWgBwdRows * D + keys * kWgBwdRows) * 2 + 4 * kWgBwdRows * 4 + kSmemAlign;
}

template <int D, bool Causal, int Keys>
__global__ void __launch_bounds__(2 * Keys, Keys == 64 ? 2 : 1) flash_bwd_wgmma_kernel(BwdParams p) {
  constexpr int Bc = Keys, Br = kWgBwdRows, kThreads = 2 * Keys;
  constexpr int ST = Br / 8;   // n-tiles of S^T (queries)
  constexpr int KC = D / 16;   // k16 steps over d
  constexpr int OT = D / 8;    // n-tiles over d
  constexpr int PK = Br / 16;  // k16 steps over the tile's queries
  constexpr std::uint32_t kRow = wg::kPanelRow;
  constexpr std::uint32_t kKPanel = Bc * kRow;   // bytes per K (V) panel
  constexpr std::uint32_t kQPanel = Br * kRow;   // bytes per Q (dO) panel
  constexpr int kStage = Br * D;                 // elements per Q (dO) stage
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto* ks = reinterpret_cast<__nv_bfloat16*>(align_smem(smem_raw));
  __nv_bfloat16* vs = ks + Bc * D;
  __nv_bfloat16* qs = vs + Bc * D;          // [2 stages][D / 64][Br][64]
  __nv_bfloat16* dos = qs + 2 * kStage;     // [2 stages][D / 64][Br][64]
  __nv_bfloat16* dss = dos + 2 * kStage;    // bf16(dS)^T, [key][query], one panel
  float* lse_s = reinterpret_cast<float*>(dss + Bc * Br);  // [2][Br], L * log2(e)
  float* delta_s = lse_s + 2 * Br;                         // [2][Br]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = warp / 4;
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int N = p.N;
  const int j0 = blockIdx.x * Bc;
  const __nv_bfloat16* qg = p.q.head(b, h);
  const __nv_bfloat16* kg = p.k.head(b, h);
  const __nv_bfloat16* vg = p.v.head(b, h);
  const __nv_bfloat16* dog = p.dout.head(b, h);
  const std::int64_t head_off = static_cast<std::int64_t>(bh) * N;
  const float* lse_g = p.lse + head_off;
  const float* delta_g = p.delta + head_off;
  const float scale_log2 = p.scale * kLog2e;

  const int i_begin = Causal ? j0 : 0;
  const int n_tiles = (N - i_begin + Br - 1) / Br;

  auto load_rows = [&](int buf, int i0) {
    load_panels<D, Br, kThreads>(qs + buf * kStage, qg, p.q.sn, i0, N);
    load_panels<D, Br, kThreads>(dos + buf * kStage, dog, p.dout.sn, i0, N);
    stage_row_stats<Br>(lse_s + buf * Br, delta_s + buf * Br, lse_g, delta_g, i0, N);
  };

  load_panels<D, Bc, kThreads>(ks, kg, p.k.sn, j0, N);
  load_panels<D, Bc, kThreads>(vs, vg, p.v.sn, j0, N);
  load_rows(0, i_begin);
  cp_async_commit();

  const int wrow = wg * 64 + (warp % 4) * 16;  // this warp's first key row in the block
  const int key[2] = {j0 + wrow + lane / 4, j0 + wrow + lane / 4 + 8};
  const std::uint32_t k_wg = smem_addr(ks) + wg * 64 * kRow, v_wg = smem_addr(vs) + wg * 64 * kRow;
  float dv[OT][4], dk[OT][4];
  zero_tiles(dv);
  zero_tiles(dk);

  for (int t = 0; t < n_tiles; ++t) {
    const int i0 = i_begin + t * Br;
    if (t + 1 < n_tiles) load_rows((t + 1) & 1, i0 + Br);
    cp_async_commit();
    cp_async_wait<1>();
    wg::fence_proxy_async();
    __syncthreads();
    const std::uint32_t q_t = smem_addr(qs + (t & 1) * kStage), do_t = smem_addr(dos + (t & 1) * kStage);
    const float* lt = lse_s + (t & 1) * Br;
    const float* dt = delta_s + (t & 1) * Br;
    const bool edge = i0 + Br > N || j0 + Bc > N || (Causal && j0 + Bc - 1 > i0);

    // S^T (64 keys x Br queries) and dP^T = V dO^T for this warpgroup's keys.
    float s[ST][4], dp[ST][4];
    zero_tiles(s);
    zero_tiles(dp);
    wg::fence_operand(s);
    wg::fence_operand(dp);
    wg::fence();
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
      const std::uint32_t in = (kc % 4) * 32;  // 16 columns inside the 64-column panel kc / 4
      wg::ss_m64n64k16<0, 0>(s, wg::desc_sw128(k_wg + (kc / 4) * kKPanel + in, 16), wg::desc_sw128(q_t + (kc / 4) * kQPanel + in, 16));
      wg::ss_m64n64k16<0, 0>(dp, wg::desc_sw128(v_wg + (kc / 4) * kKPanel + in, 16), wg::desc_sw128(do_t + (kc / 4) * kQPanel + in, 16));
    }
    wg::commit();
    wg::wait<0>();
    wg::fence_operand(s);
    wg::fence_operand(dp);
    // P^T and dS^T in place (rows: this thread's keys; columns: queries).
    const SoftmaxGrad<ST, Causal> softmax_grad{s, dp, lt, dt, scale_log2, lane, i0, key, N};
    if (edge) softmax_grad(std::true_type{});
    else softmax_grad(std::false_type{});
    std::uint32_t pa[PK][4], da[PK][4];
#pragma unroll
    for (int kc = 0; kc < PK; ++kc) {
      c_to_a(pa[kc], s, kc);
      c_to_a(da[kc], dp, kc);
    }
    // bf16(dS)^T to shared memory as [key][query]: each register of da holds two consecutive
    // queries of one key (element pair of n8 tile n, row half r: da[n / 2][(n % 2) * 2 + r]).
#pragma unroll
    for (int n = 0; n < ST; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<std::uint32_t*>(dss + swz<64>(wrow + lane / 4 + 8 * r, n * 8 + 2 * (lane % 4))) =
            da[n / 2][(n % 2) * 2 + r];
    // dV += bf16(P)^T dO and dK += bf16(dS)^T Q: B = dO (Q) with k = queries, n = d, N-major.
    wg::fence_operand(dv);
    wg::fence_operand(dk);
    wg::fence_operand(pa);
    wg::fence_operand(da);
    wg::fence();
#pragma unroll
    for (int kc = 0; kc < PK; ++kc) {
      wg::rs_pv<D>(dv, pa[kc], wg::desc_sw128(do_t + kc * 16 * kRow, kQPanel));
      wg::rs_pv<D>(dk, da[kc], wg::desc_sw128(q_t + kc * 16 * kRow, kQPanel));
    }
    wg::commit();
    wg::wait<0>();
    wg::fence_operand(dv);
    wg::fence_operand(dk);
    wg::fence_operand(pa);
    wg::fence_operand(da);
    wg::fence_proxy_async();  // the dS^T stores, visible to wgmma after the barrier
    __syncthreads();
    // dQ = dS K: A = dS (m = queries, k = keys) read M-major from [key][query]; B = K (k = keys,
    // n = d) N-major. Rows of dq: queries. At d = 128 with two warpgroups each takes one
    // 64-column panel of d over all 128 keys (one atomic per dQ element and block); otherwise
    // each takes its own 64 keys' share of all of d.
    {
      constexpr bool kByCols = D == 128 && Keys == 128;  // else each warpgroup: its keys, all of d
      constexpr int QN = kByCols ? 64 : D;               // dQ columns per warpgroup
      constexpr int QK = kByCols ? Bc / 16 : 4;          // k16 steps over keys
      float dq[QN / 8][4];
      zero_tiles(dq);
      wg::fence_operand(dq);
      wg::fence();
#pragma unroll
      for (int kc = 0; kc < QK; ++kc) {
        const std::uint32_t key_off = ((kByCols ? 0 : wg * 64) + kc * 16) * kRow;
        const std::uint32_t k_panel = kByCols ? wg * kKPanel : 0;
        wg::ss<QN, 1, 1>(dq, wg::desc_sw128(smem_addr(dss) + key_off, 16),
                      wg::desc_sw128(smem_addr(ks) + k_panel + key_off, kKPanel));
      }
      wg::commit();
      wg::wait<0>();
      wg::fence_operand(dq);
      const int qrow = (warp % 4) * 16 + lane / 4;
      const int col0 = kByCols ? wg * 64 : 0;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = i0 + qrow + 8 * r;
        if (edge && i >= N) continue;
        float* dq_row = p.dq_accum + (head_off + i) * D + col0 + 2 * (lane % 4);
#pragma unroll
        for (int t2 = 0; t2 < QN / 8; ++t2) atomic_add_pair(dq_row + t2 * 8, dq[t2][2 * r], dq[t2][2 * r + 1]);
      }
    }
    __syncthreads();
  }

  store_key_grads<D>(p, dk, dv, key, head_off, lane, N);
}

}  // namespace lpdiag::cuda::flash
