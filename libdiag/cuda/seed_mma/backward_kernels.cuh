// The seed-mma backward (after seed's delta kernel): the seed policy's roundings with the products
// on the tensor cores, in the CPU emulation's order (tiled_head.hpp, backward_seed_mma):
//  - dK, dV: one block per 64 keys, 16 per warp; query rows streamed in chunks over query tiles
//    of query_tile rows; S^T = K Q^T and dP^T = V dO^T over the feature index, then the tile's
//    partials dV += P^T dO and dK += dS^T Q from zero in k16 steps over its rows, and at the end
//    of each query tile dV = bf16(dV + bf16(partial)) (the running values kept in shared memory);
//  - dQ: one block per 64 query rows; over key tiles of key_tile keys in order (causal: those
//    that start at or before the row), the partial dS K from zero, then dQ = bf16(dQ + bf16(partial)).
// P = bf16(exp(bf16(S - L))) from the table, dS = bf16(bf16(P alpha) bf16(bf16(dP) - delta)).
#pragma once
#include "common.cuh"

namespace lpdiag::cuda::seed_mma {

// P and dS of one pair from the MMA results s (Q K^T) and dp (dO V^T).
__device__ __forceinline__ void p_and_ds(const std::uint16_t* win, const seed::Tables& t, float& s, float& dp, float lse,
                                         float delta, float alpha) {
  const float pe = exp_diff(win, t, score_of(s, alpha), lse);
  dp = bf(__fmul_rn(bf(__fmul_rn(pe, alpha)), bf(__fsub_rn(bf(dp), delta))));
  s = pe;
}

template <int D>
__host__ __device__ constexpr int dkdv_smem_bytes() {
  // K and V of the block, two chunk buffers of Q and dO, their L and delta, the running dK / dV,
  // the exp window.
  return 2 * kBlockRows * D * 2 + 2 * 2 * kChunkRows<D>() * D * 2 + 2 * 2 * kChunkRows<D>() * 4 +
         2 * (D / 4) * kThreads * 4 + kExpWindowBytes + flash::kSmemAlign;
}

template <int D, bool Causal>
__global__ void __launch_bounds__(kThreads, kBwdMinBlocks<D>) seed_mma_dkdv_kernel(seed::BwdParams p) {
  constexpr int QW = kChunkRows<D>();
  constexpr int NT = QW / 8, OT = D / 8, KC = D / 16;
  constexpr std::uint32_t kRowD = D * 2;
  constexpr int kChunkElems = QW * D;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto* ks = reinterpret_cast<__nv_bfloat16*>(flash::align_smem(smem_raw));
  __nv_bfloat16* vs = ks + kBlockRows * D;
  __nv_bfloat16* qc = vs + kBlockRows * D;    // [2][QW][D]
  __nv_bfloat16* gc = qc + 2 * kChunkElems;   // [2][QW][D]
  float* lc = reinterpret_cast<float*>(gc + 2 * kChunkElems);  // [2][QW]
  float* dc = lc + 2 * QW;                                      // [2][QW]
  auto* run = reinterpret_cast<std::uint32_t*>(dc + 2 * QW);   // [2][OT * 2][kThreads]: dV, dK as bf16 pairs
  auto* win = reinterpret_cast<std::uint16_t*>(run + 2 * OT * 2 * kThreads);

  const int N = p.N, Br = p.query_tile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, quad = lane % 4;
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int k0 = blockIdx.x * kBlockRows, kw0 = k0 + warp * 16;
  const int key[2] = {kw0 + lane / 4, kw0 + lane / 4 + 8};
  const float alpha = p.scale;
  const std::int64_t base = std::int64_t(bh) * N;
  const flash::LaneFrag<D> fd(lane);
  const std::uint32_t k_a = flash::smem_addr(ks) + warp * 16 * kRowD + fd.a;
  const std::uint32_t v_a = flash::smem_addr(vs) + warp * 16 * kRowD + fd.a;
  for (int x = 0; x < 2 * OT * 2; ++x) run[x * kThreads + threadIdx.x] = 0u;
  load_exp_window(win, p.tables);  // read after the first chunk's barrier

  auto issue = [&](int r0, int buf) {
    load_rows<D, QW>(qc + buf * kChunkElems, p.q, b, h, r0, N);
    load_rows<D, QW>(gc + buf * kChunkElems, p.dout, b, h, r0, N);
    for (int r = threadIdx.x; r < QW; r += kThreads) {
      lc[buf * QW + r] = r0 + r < N ? p.lse[base + r0 + r] : 0.f;
      dc[buf * QW + r] = r0 + r < N ? p.delta[base + r0 + r] : 0.f;
    }
  };
  load_rows<D, kBlockRows>(ks, p.k, b, h, k0, N);
  load_rows<D, kBlockRows>(vs, p.v, b, h, k0, N);
  // Causal: query tiles before the one holding the block's first key add nothing to its keys.
  const int first = Causal ? (k0 / Br) * Br : 0;
  issue(first, 0);
  flash::cp_async_commit();
  int cur = 0;
  for (int i0 = first; i0 < N; i0 += Br) {
    const int i1 = min(N, i0 + Br);
    const int n_chunks = (i1 - i0 + QW - 1) / QW;
    float pv[OT][4], pk[OT][4];
    flash::zero_tiles(pv);
    flash::zero_tiles(pk);
    for (int c = 0; c < n_chunks; ++c) {
      const int r0 = i0 + c * QW;
      const int next = c + 1 < n_chunks ? r0 + QW : i0 + Br;
      if (next < N) issue(next, cur ^ 1);
      flash::cp_async_commit();
      flash::cp_async_wait<1>();
      __syncthreads();
      if (kw0 < N && !(Causal && r0 + QW - 1 < kw0)) {
        const std::uint32_t q_nk = flash::smem_addr(qc + cur * kChunkElems) + fd.b_nk;
        const std::uint32_t g_nk = flash::smem_addr(gc + cur * kChunkElems) + fd.b_nk;
        float s[NT][4], dp[NT][4];  // S^T = K Q^T and dP^T = V dO^T
        two_products<KC, NT, kRowD>(s, dp, k_a, v_a, q_nk, g_nk);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e4 = 0; e4 < 4; ++e4) {
            const int rr = nt * 8 + 2 * quad + (e4 & 1), i = r0 + rr, j = key[e4 / 2];
            if (i < N && j < N && (!Causal || j <= i)) {
              p_and_ds(win, p.tables, s[nt][e4], dp[nt][e4], lc[cur * QW + rr], dc[cur * QW + rr], alpha);
            } else {
              s[nt][e4] = 0.f;
              dp[nt][e4] = 0.f;
            }
          }
        const std::uint32_t q_kn = flash::smem_addr(qc + cur * kChunkElems) + fd.b_kn;
        const std::uint32_t g_kn = flash::smem_addr(gc + cur * kChunkElems) + fd.b_kn;
#pragma unroll
        for (int kc = 0; kc < QW / 16; ++kc) {
          std::uint32_t ap[4], ad[4];
          flash::c_to_a(ap, s, kc);
          flash::c_to_a(ad, dp, kc);
#pragma unroll
          for (int np = 0; np < OT / 2; ++np) {
            std::uint32_t bg[4], bq[4];
            flash::ldmatrix_x4_trans(bg, flash::chunk_xor(g_kn, np) + kc * 16 * kRowD);
            flash::mma_bf16_pair(pv, np, ap, bg);
            flash::ldmatrix_x4_trans(bq, flash::chunk_xor(q_kn, np) + kc * 16 * kRowD);
            flash::mma_bf16_pair(pk, np, ad, bq);
          }
        }
      }
      __syncthreads();
      cur ^= 1;
    }
    // The query tile's partials into the running values: bf16(run + bf16(partial)).
#pragma unroll
    for (int nt = 0; nt < OT; ++nt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        std::uint32_t& rv = run[(nt * 2 + half) * kThreads + threadIdx.x];
        std::uint32_t& rk = run[(OT * 2 + nt * 2 + half) * kThreads + threadIdx.x];
        rv = pack_pair(bf(__fadd_rn(pair_lo(rv), bf(pv[nt][2 * half]))), bf(__fadd_rn(pair_hi(rv), bf(pv[nt][2 * half + 1]))));
        rk = pack_pair(bf(__fadd_rn(pair_lo(rk), bf(pk[nt][2 * half]))), bf(__fadd_rn(pair_hi(rk), bf(pk[nt][2 * half + 1]))));
      }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int j = key[half];
    if (j >= N) continue;
    __nv_bfloat16 *dv = p.dv.row(b, h, j), *dk = p.dk.row(b, h, j);
#pragma unroll
    for (int nt = 0; nt < OT; ++nt) {
      const int c = nt * 8 + 2 * quad;
      const std::uint32_t rv = run[(nt * 2 + half) * kThreads + threadIdx.x];
      const std::uint32_t rk = run[(OT * 2 + nt * 2 + half) * kThreads + threadIdx.x];
      dv[c] = __float2bfloat16_rn(pair_lo(rv));
      dv[c + 1] = __float2bfloat16_rn(pair_hi(rv));
      dk[c] = __float2bfloat16_rn(pair_lo(rk));
      dk[c + 1] = __float2bfloat16_rn(pair_hi(rk));
    }
  }
}

template <int D>
__host__ __device__ constexpr int dq_smem_bytes() {
  // Q and dO of the block, two chunk buffers of K and V, the exp window.
  return 2 * kBlockRows * D * 2 + 2 * 2 * kChunkRows<D>() * D * 2 + kExpWindowBytes + flash::kSmemAlign;
}

template <int D, bool Causal>
__global__ void __launch_bounds__(kThreads, kBwdMinBlocks<D>) seed_mma_dq_kernel(seed::BwdParams p) {
  constexpr int KW = kChunkRows<D>();
  constexpr int NT = KW / 8, OT = D / 8, KC = D / 16;
  constexpr std::uint32_t kRowD = D * 2;
  constexpr int kChunkElems = KW * D;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto* qs = reinterpret_cast<__nv_bfloat16*>(flash::align_smem(smem_raw));
  __nv_bfloat16* gs = qs + kBlockRows * D;
  __nv_bfloat16* kc_ = gs + kBlockRows * D;  // [2][KW][D]
  __nv_bfloat16* vc = kc_ + 2 * kChunkElems;  // [2][KW][D]
  auto* win = reinterpret_cast<std::uint16_t*>(vc + 2 * kChunkElems);

  const int N = p.N, Bc = p.key_tile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, quad = lane % 4;
  const int m_block = Causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int m0 = m_block * kBlockRows, wrow0 = m0 + warp * 16;
  const int row[2] = {wrow0 + lane / 4, wrow0 + lane / 4 + 8};
  const float alpha = p.scale;
  const std::int64_t base = std::int64_t(bh) * N;
  const float lse[2] = {row[0] < N ? p.lse[base + row[0]] : 0.f, row[1] < N ? p.lse[base + row[1]] : 0.f};
  const float delta[2] = {row[0] < N ? p.delta[base + row[0]] : 0.f, row[1] < N ? p.delta[base + row[1]] : 0.f};
  const flash::LaneFrag<D> fd(lane);
  const std::uint32_t q_a = flash::smem_addr(qs) + warp * 16 * kRowD + fd.a;
  const std::uint32_t g_a = flash::smem_addr(gs) + warp * 16 * kRowD + fd.a;
  const bool warp_live = wrow0 < N;

  const int kmax = Causal ? min(N, m0 + kBlockRows) : N;
  auto issue = [&](int kb, int buf) {
    load_rows<D, KW>(kc_ + buf * kChunkElems, p.k, b, h, kb, N);
    load_rows<D, KW>(vc + buf * kChunkElems, p.v, b, h, kb, N);
  };
  load_exp_window(win, p.tables);  // read after the first chunk's barrier
  load_rows<D, kBlockRows>(qs, p.q, b, h, m0, N);
  load_rows<D, kBlockRows>(gs, p.dout, b, h, m0, N);
  issue(0, 0);
  flash::cp_async_commit();
  int cur = 0;
  float dq[OT][4];
  flash::zero_tiles(dq);
  for (int j0 = 0; j0 < kmax; j0 += Bc) {
    const int j1 = min(kmax, j0 + Bc);
    const int n_chunks = (j1 - j0 + KW - 1) / KW;
    float part[OT][4];
    flash::zero_tiles(part);
    for (int c = 0; c < n_chunks; ++c) {
      const int kb = j0 + c * KW;
      const int next = c + 1 < n_chunks ? kb + KW : j0 + Bc;
      if (next < kmax) issue(next, cur ^ 1);
      flash::cp_async_commit();
      flash::cp_async_wait<1>();
      __syncthreads();
      if (warp_live && !(Causal && kb > wrow0 + 15)) {
        const std::uint32_t k_nk = flash::smem_addr(kc_ + cur * kChunkElems) + fd.b_nk;
        const std::uint32_t v_nk = flash::smem_addr(vc + cur * kChunkElems) + fd.b_nk;
        float s[NT][4], dp[NT][4];  // S = Q K^T and dP = dO V^T
        two_products<KC, NT, kRowD>(s, dp, q_a, g_a, k_nk, v_nk);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e4 = 0; e4 < 4; ++e4) {
            const int ri = e4 / 2, i = row[ri], j = kb + nt * 8 + 2 * quad + (e4 & 1);
            if (i < N && j < N && (!Causal || j <= i)) {
              p_and_ds(win, p.tables, s[nt][e4], dp[nt][e4], lse[ri], delta[ri], alpha);
            } else {
              dp[nt][e4] = 0.f;
            }
          }
        const std::uint32_t k_kn = flash::smem_addr(kc_ + cur * kChunkElems) + fd.b_kn;
#pragma unroll
        for (int kc = 0; kc < KW / 16; ++kc) {
          std::uint32_t a[4];
          flash::c_to_a(a, dp, kc);
#pragma unroll
          for (int np = 0; np < OT / 2; ++np) {
            std::uint32_t bk[4];
            flash::ldmatrix_x4_trans(bk, flash::chunk_xor(k_kn, np) + kc * 16 * kRowD);
            flash::mma_bf16_pair(part, np, a, bk);
          }
        }
      }
      __syncthreads();
      cur ^= 1;
    }
    // A row's dQ takes the tile only when the tile holds one of its keys (the CPU skips it otherwise).
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      if (Causal && j0 > row[ri]) continue;
#pragma unroll
      for (int nt = 0; nt < OT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = dq[nt][2 * ri + e];
          x = bf(__fadd_rn(x, bf(part[nt][2 * ri + e])));
        }
    }
  }
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    const int i = row[ri];
    if (i >= N) continue;
    __nv_bfloat16* o = p.dq.row(b, h, i);
#pragma unroll
    for (int nt = 0; nt < OT; ++nt) {
      const int c = nt * 8 + 2 * quad;
      o[c] = __float2bfloat16_rn(dq[nt][2 * ri]);
      o[c + 1] = __float2bfloat16_rn(dq[nt][2 * ri + 1]);
    }
  }
}

}  // namespace lpdiag::cuda::seed_mma
