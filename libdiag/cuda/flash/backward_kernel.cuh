// FlashAttention-2 backward, bf16: one block per (Bc keys, batch x head), Bc / 16 warps of 16
// keys (Bc = 64 or 128), looping over query tiles of Br = 64 rows
// double-buffered through cp.async. Per tile: S recomputed, P = 2^(S alpha log2 e - L log2 e)
// (MUFU exp; the CPU fa2 policy's P up to its last bits), dP = dO V^T, dS = P (dP - delta) in
// fp32; dV += bf16(P)^T dO and dK += bf16(dS)^T Q accumulate in fp32 registers; dQ += bf16(dS) K
// goes to an fp32 buffer by atomic adds. The scale alpha and the final bf16 rounding come last,
// as on the CPU. Only tiles that cross the sequence's end or the causal diagonal are masked.
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <type_traits>

#include "backward_steps.cuh"
#include "error_sums.cuh"
#include "forward_kernel.cuh"
#include "mma.cuh"
#include "params.cuh"

namespace lpdiag::cuda::flash {

template <int Bc>
__host__ __device__ constexpr int bwd_warps() {
  return Bc / 16;
}

// Query rows per tile, both head dims. At d = 128, 64 rows against 32 took the backward from
// 157 to 171 TFLOP/s causal and 164 to 188 non-causal on the H200 (docs/results/performance.md).
constexpr int kBwdRows = 64;

template <int D, int Bc>
__host__ __device__ constexpr int bwd_smem_bytes() {
  constexpr int Br = kBwdRows;
  return (2 * Bc * D + 4 * Br * D + Br * Bc) * 2 + 4 * Br * 4 + kSmemAlign;
}

template <int D, bool Causal, int Bc>
__global__ void __launch_bounds__(bwd_warps<Bc>() * 32) flash_bwd_kernel(BwdParams p) {
  constexpr int kBwdWarps = bwd_warps<Bc>();
  constexpr int Br = kBwdRows;
  constexpr int Threads = kBwdWarps * 32;
  constexpr int ST = Br / 8;   // n-tiles of S^T (queries)
  constexpr int KC = D / 16;   // k-chunks over d
  constexpr int OT = D / 8;    // n-tiles over d
  constexpr int RG = Br / 16;  // dQ row groups
  constexpr int CG = kBwdWarps / RG;
  constexpr int QT = OT / CG;  // dQ n-tiles per warp
  constexpr std::uint32_t kRowD = D * 2, kRowBc = Bc * 2;  // bytes per shared row
  constexpr std::uint32_t kStage = Br * D * 2;             // bytes per query-tile stage
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto* ks = reinterpret_cast<__nv_bfloat16*>(align_smem(smem_raw));
  __nv_bfloat16* vs = ks + Bc * D;
  // Stage s of the query (dO) tile lives at qs + s * Br * D (dos + s * Br * D).
  __nv_bfloat16* qs = vs + Bc * D;
  __nv_bfloat16* dos = qs + 2 * Br * D;
  __nv_bfloat16* dss = dos + 2 * Br * D;  // bf16(dS), [query][key], swizzled over Bc columns
  float* lse_s = reinterpret_cast<float*>(dss + Br * Bc);  // [2][Br], L * log2(e)
  float* delta_s = lse_s + 2 * Br;                         // [2][Br]

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
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
  // P = 2^(S * alpha * log2 e - L * log2 e): one FFMA and the MUFU exp, as FA2 does. The
  // backward is not asked to match the CPU bit for bit (its gradients are compared in norm).
  const float scale_log2 = p.scale * kLog2e;

  const int i_begin = Causal ? j0 : 0;
  const int n_tiles = (N - i_begin + Br - 1) / Br;

  auto load_rows = [&](int buf, int i0) {
    load_tile<D, Br, Threads>(qs + buf * Br * D, qg, p.q.sn, i0, N);
    load_tile<D, Br, Threads>(dos + buf * Br * D, dog, p.dout.sn, i0, N);
    stage_row_stats<Br>(lse_s + buf * Br, delta_s + buf * Br, lse_g, delta_g, i0, N);
  };

  load_tile<D, Bc, Threads>(ks, kg, p.k.sn, j0, N);
  load_tile<D, Bc, Threads>(vs, vg, p.v.sn, j0, N);
  load_rows(0, i_begin);
  cp_async_commit();

  // This lane's fragment addresses (LaneFrag): K rows of this warp (V at + Bc rows), the query
  // stage 0 (dO at + 2 stages), bf16(dS) rows of this warp's dQ row group, and K as dQ's B
  // operand over this warp's column group.
  const int rg = warp % RG, cg = warp / RG;
  const LaneFrag<D> fd(lane);
  const std::uint32_t k_a = smem_addr(ks) + warp * 16 * kRowD + fd.a;
  const std::uint32_t q_nk = smem_addr(qs) + fd.b_nk;
  const std::uint32_t q_kn = smem_addr(qs) + fd.b_kn;
  const std::uint32_t k_kn = chunk_xor(smem_addr(ks) + fd.b_kn, cg * QT / 2);
  const std::uint32_t ds_a = smem_addr(dss) + rg * 16 * kRowBc + LaneFrag<Bc>(lane).a;
  constexpr std::uint32_t kVOffset = Bc * D * 2, kDoutOffset = 2 * kStage;

  float dv[OT][4], dk[OT][4];
  zero_tiles(dv);
  zero_tiles(dk);
  const int key[2] = {j0 + warp * 16 + lane / 4, j0 + warp * 16 + lane / 4 + 8};

  for (int t = 0; t < n_tiles; ++t) {
    const int i0 = i_begin + t * Br;
    if (t + 1 < n_tiles) load_rows((t + 1) & 1, i0 + Br);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const std::uint32_t stage = (t & 1) * kStage;
    const std::uint32_t q_nk_t = q_nk + stage, q_kn_t = q_kn + stage;
    const float* lt = lse_s + (t & 1) * Br;
    const float* dt = delta_s + (t & 1) * Br;
    // Tiles that cross the end of the sequence or the causal diagonal need the mask.
    const bool edge = i0 + Br > N || j0 + Bc > N || (Causal && j0 + Bc - 1 > i0);

    // S^T (16 keys x Br queries) and dP^T = V dO^T, both with this warp's keys as rows.
    float s[ST][4], dp[ST][4];
    zero_tiles(s);
    zero_tiles(dp);
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
      std::uint32_t ka[4], va[4];
      const std::uint32_t a_addr = chunk_xor(k_a, kc), b_addr = chunk_xor(q_nk_t, kc);
      ldmatrix_x4(ka, a_addr);
      ldmatrix_x4(va, a_addr + kVOffset);
#pragma unroll
      for (int np = 0; np < ST / 2; ++np) {
        std::uint32_t bq[4], bd[4];
        ldmatrix_x4(bq, b_addr + np * 16 * kRowD);
        ldmatrix_x4(bd, b_addr + np * 16 * kRowD + kDoutOffset);
        mma_bf16_pair(s, np, ka, bq);
        mma_bf16_pair(dp, np, va, bd);
      }
    }
    // P^T and dS^T in place.
    const SoftmaxGrad<ST, Causal> softmax_grad{s, dp, lt, dt, scale_log2, lane, i0, key, N};
    if (edge) softmax_grad(std::true_type{});
    else softmax_grad(std::false_type{});
    // bf16(P)^T and bf16(dS)^T as A fragments, straight from the registers of S^T and dP^T.
    std::uint32_t pa[Br / 16][4], da[Br / 16][4];
#pragma unroll
    for (int kc = 0; kc < Br / 16; ++kc) {
      c_to_a(pa[kc], s, kc);
      c_to_a(da[kc], dp, kc);
    }
    // dV += bf16(P)^T dO, dK += bf16(dS)^T Q.
#pragma unroll
    for (int np = 0; np < OT / 2; ++np) {
      const std::uint32_t b_addr = chunk_xor(q_kn_t, np);
#pragma unroll
      for (int kc = 0; kc < Br / 16; ++kc) {
        std::uint32_t bd[4], bq[4];
        ldmatrix_x4_trans(bd, b_addr + kc * 16 * kRowD + kDoutOffset);
        ldmatrix_x4_trans(bq, b_addr + kc * 16 * kRowD);
        mma_bf16_pair(dv, np, pa[kc], bd);
        mma_bf16_pair(dk, np, da[kc], bq);
      }
    }
    // bf16(dS) to shared memory as [query][key] for dQ = dS K: the halves of da (C fragment
    // element e of tile n is half e & 1 of register (n % 2) * 2 + e / 2 of da[n / 2]).
#pragma unroll
    for (int n = 0; n < ST; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int il = n * 8 + 2 * (lane % 4) + (e & 1);
        const int jl = warp * 16 + lane / 4 + (e / 2) * 8;
        const std::uint32_t w = da[n / 2][(n % 2) * 2 + e / 2];
        dss[swz<Bc>(il, jl)] = __ushort_as_bfloat16(static_cast<unsigned short>((e & 1) ? w >> 16 : w & 0xffffu));
      }
    __syncthreads();
    {
      float dq[QT][4];
      zero_tiles(dq);
#pragma unroll
      for (int kc = 0; kc < Bc / 16; ++kc) {
        std::uint32_t a[4];
        ldmatrix_x4(a, chunk_xor(ds_a, kc));
#pragma unroll
        for (int np = 0; np < QT / 2; ++np) {
          std::uint32_t bk[4];
          ldmatrix_x4_trans(bk, chunk_xor(k_kn, np) + kc * 16 * kRowD);
          mma_bf16_pair(dq, np, a, bk);
        }
      }
      float* dq_rows = p.dq_accum + (head_off + i0 + rg * 16 + lane / 4) * D + cg * QT * 8 + 2 * (lane % 4);
#pragma unroll
      for (int q2 = 0; q2 < QT; ++q2)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          const int i = i0 + rg * 16 + lane / 4 + (e / 2) * 8;
          if (!edge || i < N) atomic_add_pair(dq_rows + (e / 2) * 8 * D + q2 * 8, dq[q2][e], dq[q2][e + 1]);
        }
    }
    __syncthreads();
  }

  store_key_grads<D>(p, dk, dv, key, head_off, lane, N);
}

// delta_i = sum_c dO_ic O_ic, in fp32 and in the CPU's order (one thread per row, c ascending).
// full: also delta_lp - delta_hp with delta_hp = sum_c dO_ic (O_ic - residual_ic) in fp64. That sum's
// order does not matter at fp64, so D / 8 lanes share a row and read the fp32 residual coalesced
// (the thread-per-row loop over it took 92 against 24 us at the GPT-2 shape).
template <int D, bool Full>
__global__ void __launch_bounds__(256) flash_bwd_delta_kernel(BwdParams p) {
  constexpr int kRows = 256;            // rows per block, one thread each for delta
  constexpr int kLanesPerRow = D / 8;   // full: lanes per row of the fp64 pass, 8 columns each
  constexpr int kRowsPerPass = 256 / kLanesPerRow;
  __shared__ BlockErrorSums err_s;
  __shared__ double hp_s[Full ? kRows : 1];
  if (Full && threadIdx.x == 0) err_s.clear();
  const int bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
  const int row0 = blockIdx.x * kRows;
  const int i = row0 + threadIdx.x;
  const std::int64_t head_off = static_cast<std::int64_t>(bh) * p.N;
  const __nv_bfloat16* o_head = p.o.head(b, h);
  const __nv_bfloat16* g_head = p.dout.head(b, h);
  if constexpr (Full) {
    const int sub = threadIdx.x % kLanesPerRow, c0 = sub * 8;
    for (int r = threadIdx.x / kLanesPerRow; r < kRows; r += kRowsPerPass) {
      const int ri = row0 + r;
      double hp = 0.0;
      if (ri < p.N) {
        const uint4 ov = *reinterpret_cast<const uint4*>(o_head + ri * p.o.sn + c0);
        const uint4 gv = *reinterpret_cast<const uint4*>(g_head + ri * p.dout.sn + c0);
        const float* res = p.residual + (head_off + ri) * D + c0;  // rows are 16-byte aligned
        float rv[8];
        *reinterpret_cast<float4*>(rv) = *reinterpret_cast<const float4*>(res);
        *reinterpret_cast<float4*>(rv + 4) = *reinterpret_cast<const float4*>(res + 4);
        const auto* ob = reinterpret_cast<const __nv_bfloat16*>(&ov);
        const auto* gb = reinterpret_cast<const __nv_bfloat16*>(&gv);
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          const double of = __bfloat162float(ob[c]), gf = __bfloat162float(gb[c]);
          hp += gf * (of - static_cast<double>(rv[c]));
        }
      }
#pragma unroll
      for (int off = kLanesPerRow / 2; off > 0; off /= 2) hp += __shfl_xor_sync(0xffffffffu, hp, off);
      if (sub == 0) hp_s[r] = hp;
    }
    __syncthreads();
  }
  ErrorSums err;
  if (i < p.N) {
    const __nv_bfloat16* o = o_head + i * p.o.sn;
    const __nv_bfloat16* g = g_head + i * p.dout.sn;
    float acc = 0.f;
#pragma unroll 4
    for (int c8 = 0; c8 < D; c8 += 8) {
      const uint4 ov = *reinterpret_cast<const uint4*>(o + c8);
      const uint4 gv = *reinterpret_cast<const uint4*>(g + c8);
      const auto* ob = reinterpret_cast<const __nv_bfloat16*>(&ov);
      const auto* gb = reinterpret_cast<const __nv_bfloat16*>(&gv);
#pragma unroll
      for (int c = 0; c < 8; ++c) acc = __fadd_rn(acc, __fmul_rn(__bfloat162float(gb[c]), __bfloat162float(ob[c])));
    }
    p.delta[head_off + i] = acc;
    if constexpr (Full) err.add(static_cast<double>(acc) - hp_s[threadIdx.x]);
  }
  if constexpr (Full) {
    err.warp_sum();
    if (threadIdx.x % 32 == 0) err_s.add(err);
    __syncthreads();
    if (threadIdx.x == 0) {
      DeviceHeadCounters* c = p.counters + h;
      err_s.flush(&c->delta_err_sum, &c->delta_err_sumsq, &c->delta_err_count, &c->delta_err_pos, &c->delta_err_neg);
    }
  }
}

// dQ = bf16(alpha * dQ_accum): the accumulator contiguous (B, H, N, D), dQ as its view says.
template <int D>
__global__ void flash_bwd_dq_kernel(const float* acc, OutView dq, int H, int N, std::int64_t n, float scale) {
  for (std::int64_t x = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; x < n;
       x += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = x / D, bh = row / N;
    dq.row(static_cast<int>(bh / H), static_cast<int>(bh % H), static_cast<int>(row % N))[x % D] =
        __float2bfloat16_rn(__fmul_rn(scale, acc[x]));
  }
}

}  // namespace lpdiag::cuda::flash
