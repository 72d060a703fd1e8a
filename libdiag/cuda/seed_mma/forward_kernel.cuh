// The seed-mma forward: the seed policy's tile order and roundings (seed/seed_forward_kernel.cuh
// does the same on the CUDA cores), with S = Q K^T and the tile's P-bar V on the tensor cores.
// One block per 64 query rows and (b, h), four warps of 16 rows. Each key tile of key_tile keys
// is read twice, chunk by chunk: K chunks first (S, kept as bf16 bits in shared memory, one slot
// per lane, and the tile max), then V chunks (P-bar from the exp table, the row sum in lane
// order, P-bar V). Keys after the block's last row (causal) are never loaded: they are the
// paper's masked entries, -max(bf16), whose P-bar is 0. At `full` the O error is formed by
// o_error_kernel.cuh afterwards.
#pragma once
#include "../flash/error_sums.cuh"
#include "../seed/row_common.cuh"
#include "common.cuh"
#include "lpdiag/numerics/stochastic_bf16.hpp"

namespace lpdiag::cuda::seed_mma {

template <int D>
__host__ __device__ constexpr int fwd_tile_bytes() {
  return (kBlockRows * D + 2 * kChunkRows<D>() * D) * 2;
}
// Shared memory of a launch: Q, two chunk buffers, the S slots (key_tile / 8 per lane), the exp window.
template <int D>
inline int fwd_smem_bytes(int key_tile) {
  return fwd_tile_bytes<D>() + kWarps * key_tile * 32 + kExpWindowBytes + flash::kSmemAlign;
}

// The next chunk to load after (t, kind, c): K chunks of tile t, then its V chunks, then tile t + 1.
struct ChunkPos {
  int t, kind, c;  // kind 0: K, 1: V; t < 0: none
};
__device__ __forceinline__ ChunkPos next_chunk(ChunkPos x, int n_chunks, int T, int key_end) {
  if (x.c + 1 < n_chunks) return {x.t, x.kind, x.c + 1};
  if (x.kind == 0) return {x.t, 1, 0};
  if ((x.t + 1) * T < key_end) return {x.t + 1, 0, 0};
  return {-1, 0, 0};
}

template <int D, bool Causal, int Level>
__global__ void __launch_bounds__(kThreads, kFwdMinBlocks<D>) seed_mma_fwd_kernel(seed::FwdParams p) {
  constexpr int KW = kChunkRows<D>();
  constexpr int NT = KW / 8;  // S n-tiles per chunk
  constexpr int OT = D / 8;   // O n-tiles
  constexpr int KC = D / 16;  // k-steps of Q K^T
  constexpr std::uint32_t kRowD = D * 2;
  constexpr int kChunkElems = KW * D;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto* qs = reinterpret_cast<__nv_bfloat16*>(flash::align_smem(smem_raw));
  __nv_bfloat16* cs = qs + kBlockRows * D;
  auto* slots = reinterpret_cast<uint2*>(cs + 2 * kChunkElems);
  auto* win = reinterpret_cast<std::uint16_t*>(slots + kWarps * (p.key_tile / 8) * 32);

  const int T = p.key_tile, N = p.N;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, quad = lane % 4;
  uint2* my_s = slots + warp * (T / 8) * 32 + lane;  // [n-tile of the tile][lane]
  const int m_block = Causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // long causal rows first
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int m0 = m_block * kBlockRows, wrow0 = m0 + warp * 16;
  const int row[2] = {wrow0 + lane / 4, wrow0 + lane / 4 + 8};
  const int key_end = Causal ? min(N, m0 + kBlockRows) : N;  // keys any row of the block sees
  const float alpha = p.scale;
  const float neg_inf = -__int_as_float(0x7f800000);
  const bool fixed = p.fix.kind == 1 || p.fix.kind == 2;
  const bool warp_live = wrow0 < N;

  const flash::LaneFrag<D> fd(lane);
  const std::uint32_t q_a = flash::smem_addr(qs) + warp * 16 * kRowD + fd.a;

  float m[2] = {neg_inf, neg_inf}, l[2] = {0.f, 0.f};
  float acc[OT][4];
  flash::zero_tiles(acc);
  float row_max[2] = {neg_inf, neg_inf}, logit_max[2] = {neg_inf, neg_inf};
  long long row_count[2] = {0, 0};
  unsigned int tile_rep[2] = {0, 0}, pbar_one[2] = {0, 0};
  bool engaged[2] = {false, false};

  auto issue = [&](ChunkPos x, int buf) {
    load_rows<D, KW>(cs + buf * kChunkElems, x.kind ? p.v : p.k, b, h, x.t * T + x.c * KW, N);
  };
  load_exp_window(win, p.tables);  // read after the first chunk's barrier
  load_rows<D, kBlockRows>(qs, p.q, b, h, m0, N);
  issue({0, 0, 0}, 0);
  flash::cp_async_commit();
  int cur = 0;

  const int n_tiles = (N + T - 1) / T;
  for (int t = 0; t < n_tiles; ++t) {
    const int j0 = t * T, jn = min(j0 + T, N);
    const int n_chunks = j0 < key_end ? (min(jn, key_end) - j0 + KW - 1) / KW : 0;
    float rm[2] = {neg_inf, neg_inf};
    int tc[2] = {0, 0};
    // Pass 1: S of the tile's real entries, their max and its count per lane.
    for (int c = 0; c < n_chunks; ++c) {
      const ChunkPos nx = next_chunk({t, 0, c}, n_chunks, T, key_end);
      if (nx.t >= 0) issue(nx, cur ^ 1);
      flash::cp_async_commit();
      flash::cp_async_wait<1>();
      __syncthreads();
      const int kb = j0 + c * KW;
      if (warp_live && !(Causal && kb > wrow0 + 15)) {
        const std::uint32_t k_nk = flash::smem_addr(cs + cur * kChunkElems) + fd.b_nk;
        float s[NT][4];
        flash::zero_tiles(s);
#pragma unroll
        for (int kc = 0; kc < KC; ++kc) {
          std::uint32_t qf[4];
          flash::ldmatrix_x4(qf, flash::chunk_xor(q_a, kc));
#pragma unroll
          for (int np = 0; np < NT / 2; ++np) {
            std::uint32_t bfr[4];
            flash::ldmatrix_x4(bfr, flash::chunk_xor(k_nk, kc) + np * 16 * kRowD);
            flash::mma_bf16_pair(s, np, qf, bfr);
          }
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
          for (int e4 = 0; e4 < 4; ++e4) {
            const int ri = e4 / 2, j = kb + nt * 8 + 2 * quad + (e4 & 1);
            const bool real = j < N && (!Causal || j <= row[ri]);
            const float v = real ? score_of(s[nt][e4], alpha) : 0.f;
            if (real) {
              if (v > rm[ri]) rm[ri] = v, tc[ri] = 1;
              else if (v == rm[ri]) ++tc[ri];
            }
            s[nt][e4] = v;
          }
          my_s[(c * NT + nt) * 32] = make_uint2(pack_pair(s[nt][0], s[nt][1]), pack_pair(s[nt][2], s[nt][3]));
        }
      }
      __syncthreads();
      cur ^= 1;
    }
    // The tile max, the counters, the fix's shift, the new running max, per row.
    float m_new[2], corr[2];
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      const float rmax = quad_max(rm[ri]);
      const int tcount = quad_add(rm[ri] == rmax ? tc[ri] : 0);
      const int n_real = Causal ? max(0, min(jn, row[ri] + 1) - j0) : jn - j0;
      const int n_masked = (jn - j0) - n_real;
      float tm = n_real > 0 ? rmax : neg_inf;
      if (n_masked > 0) tm = fmaxf(tm, -kBf16Max);
      if (Level > 0 && n_real > 0) {
        tile_rep[ri] += tcount >= 2;
        if (rmax > row_max[ri]) row_max[ri] = rmax, row_count[ri] = tcount;
        else if (rmax == row_max[ri]) row_count[ri] += tcount;
        logit_max[ri] = fmaxf(logit_max[ri], rmax);
      }
      float shift = tm;
      if (fixed) {
        const float lim = bf(__fsub_rn(tm, p.fix.tol));
        int near = 0;
        if (warp_live)
          for (int c = 0; c < n_chunks; ++c)
            for (int nt = 0; nt < NT; ++nt) {
              const std::uint32_t u = ri == 0 ? my_s[(c * NT + nt) * 32].x : my_s[(c * NT + nt) * 32].y;
              const int jb = j0 + c * KW + nt * 8 + 2 * quad;
              if (Causal && jb > wrow0 + 15) continue;  // not written: every entry masked
              const float v0 = pair_lo(u), v1 = pair_hi(u);
              near += (jb < N && (!Causal || jb <= row[ri]) && v0 >= lim);
              near += (jb + 1 < N && (!Causal || jb + 1 <= row[ri]) && v1 >= lim);
            }
        near = quad_add(near) + (-kBf16Max >= lim ? n_masked : 0);
        shift = seed::fix_shift(p.fix, tm, near);
        engaged[ri] = engaged[ri] || fmaxf(m[ri], shift) != fmaxf(m[ri], tm);
      }
      m_new[ri] = fmaxf(m[ri], shift);
      corr[ri] = m[ri] == neg_inf ? 0.f : exp_diff(win, p.tables, m[ri], m_new[ri]);
    }
    // Pass 2: P-bar, its row sum in lane order, and the tile's P-bar V from zero.
    float lq[2] = {0.f, 0.f};
    float part[OT][4];
    flash::zero_tiles(part);
    for (int c = 0; c < n_chunks; ++c) {
      const ChunkPos nx = next_chunk({t, 1, c}, n_chunks, T, key_end);
      if (nx.t >= 0) issue(nx, cur ^ 1);
      flash::cp_async_commit();
      flash::cp_async_wait<1>();
      __syncthreads();
      const int kb = j0 + c * KW;
      if (warp_live && !(Causal && kb > wrow0 + 15)) {
        float pv[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint2 u = my_s[(c * NT + nt) * 32];
          const float sv[4] = {pair_lo(u.x), pair_hi(u.x), pair_lo(u.y), pair_hi(u.y)};
#pragma unroll
          for (int e4 = 0; e4 < 4; ++e4) {
            const int ri = e4 / 2, j = kb + nt * 8 + 2 * quad + (e4 & 1);
            const bool real = j < N && (!Causal || j <= row[ri]);
            const float pe = real ? exp_diff(win, p.tables, sv[e4], m_new[ri]) : 0.f;
            if (Level > 0 && real) pbar_one[ri] += pe == 1.f;
            lq[ri] = __fadd_rn(lq[ri], pe);
            pv[nt][e4] = pe;
          }
        }
        const std::uint32_t v_kn = flash::smem_addr(cs + cur * kChunkElems) + fd.b_kn;
#pragma unroll
        for (int kc = 0; kc < KW / 16; ++kc) {
          std::uint32_t a[4];
          flash::c_to_a(a, pv, kc);
#pragma unroll
          for (int np = 0; np < OT / 2; ++np) {
            std::uint32_t bfr[4];
            flash::ldmatrix_x4_trans(bfr, flash::chunk_xor(v_kn, np) + kc * 16 * kRowD);
            flash::mma_bf16_pair(part, np, a, bfr);
          }
        }
      }
      __syncthreads();
      cur ^= 1;
    }
#pragma unroll
    for (int ri = 0; ri < 2; ++ri) {
      const float ls = quad_sum_ordered(lq[ri], lane);
      l[ri] = bf(__fadd_rn(bf(__fmul_rn(l[ri], corr[ri])), fmaxf(bf(ls), seed::kRowSumFloor)));
#pragma unroll
      for (int nt = 0; nt < OT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& a = acc[nt][2 * ri + e];
          a = bf(__fadd_rn(bf(__fmul_rn(a, corr[ri])), bf(part[nt][2 * ri + e])));
        }
      m[ri] = m_new[ri];
    }
  }

  const bool sr = p.fix.kind == 3;
  flash::ErrorSums none;
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    const int i = row[ri];
    const bool live = i < N;
    const std::int64_t r = std::int64_t(bh) * N + i;
    if (live) {
      __nv_bfloat16* o = p.o.row(b, h, i);
#pragma unroll
      for (int nt = 0; nt < OT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = nt * 8 + 2 * quad + e;
          const float x = __fdiv_rn(acc[nt][2 * ri + e], l[ri]);
          const float out = sr ? seed::from_bits(sr_bf16_bits(x, sr_random_bits(p.fix.seed, std::uint64_t(r) * D + c))) : bf(x);
          o[c] = __float2bfloat16_rn(out);
        }
      if (quad == 0) p.lse[r] = bf(__fadd_rn(m[ri], seed::log_bf(p.tables, l[ri])));
    }
    if (Level > 0) {
      const unsigned int pb = static_cast<unsigned int>(quad_add(static_cast<int>(pbar_one[ri])));
      seed::commit_row_counters<1>(p.counters + h, live && quad == 0, row_count[ri], row_max[ri], engaged[ri], tile_rep[ri], pb,
                                   logit_max[ri], none);
    }
  }
}

}  // namespace lpdiag::cuda::seed_mma
