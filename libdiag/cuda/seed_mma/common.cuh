// What the seed-mma kernels share (docs/reference/cuda-kernels.md, "The seed-mma kernels"): the seed
// policy's roundings and tables (seed/seed_math.cuh) with the products on the tensor cores
// (flash/mma.cuh). Blocks of four warps, 16 rows (query rows, or keys in the dK/dV kernel) per
// warp; keys (or query rows) streamed through shared memory in chunks of kChunkRows<D>.
#pragma once
#include "../flash/mma.cuh"
#include "../flash/tile_copy.cuh"
#include "../seed/seed_math.cuh"
#include "../seed/seed_params.cuh"

namespace lpdiag::cuda::seed_mma {

using seed::bf;
using seed::kBf16Max;
using seed::View;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockRows = kWarps * 16;  // rows of a block: 64

// Blocks per SM the compiler must leave registers for (__launch_bounds__' second argument), d = 64. The
// kernels are latency-bound (ncu, 12-18% occupancy, issue slots 23-40% busy): at
// 190-255 registers they fit 2 blocks per SM; capped at 168 for 3 (the backward with a few hundred
// bytes of spills, the forward at d = 64 with none) the backward ran 18-20% faster at the GPT-2
// shape and the forward 13% (docs/results/performance.md).
// Overridable for A/B builds (-DLPDIAG_SEED_MMA_FWD_MIN_BLOCKS=N, -DLPDIAG_SEED_MMA_BWD_MIN_BLOCKS=N).
#ifndef LPDIAG_SEED_MMA_FWD_MIN_BLOCKS
#define LPDIAG_SEED_MMA_FWD_MIN_BLOCKS 3
#endif
#ifndef LPDIAG_SEED_MMA_BWD_MIN_BLOCKS
#define LPDIAG_SEED_MMA_BWD_MIN_BLOCKS 3
#endif
// At d = 128 the cap would spill 64-600 bytes per thread and was not measured: those kernels keep
// the compiler's choice (1).
template <int D>
constexpr int kFwdMinBlocks = D == 64 ? LPDIAG_SEED_MMA_FWD_MIN_BLOCKS : 1;
template <int D>
constexpr int kBwdMinBlocks = D == 64 ? LPDIAG_SEED_MMA_BWD_MIN_BLOCKS : 1;

// Rows per streamed chunk: 64 at d = 64, 32 at d = 128 (the registers of the products' results).
template <int D>
__host__ __device__ constexpr int kChunkRows() {
  return D == 64 ? 64 : 32;
}

// The exp table's busiest stretch (seed::kExpWindowLo), copied to shared memory by every block.
// The values are the table's own, so the results do not change, only where they are read from: a
// warp's scattered 2-byte reads cost one shared-memory pass per bank conflict instead of one L1
// pass per distinct cache line.
using seed::kExpWindow;
using seed::kExpWindowLo;
constexpr int kExpWindowBytes = kExpWindow * 2;

__device__ __forceinline__ void load_exp_window(std::uint16_t* win, const seed::Tables& t) {
  const auto* src = reinterpret_cast<const std::uint32_t*>(t.exp + kExpWindowLo);
  auto* dst = reinterpret_cast<std::uint32_t*>(win);
  for (unsigned i = threadIdx.x; i < kExpWindow / 2; i += kThreads) dst[i] = __ldg(src + i);
}
// bf16(expf(bf16(a - b))), seed::exp_diff's value, from the window where it holds x.
__device__ __forceinline__ float exp_diff(const std::uint16_t* win, const seed::Tables& t, float a, float b) {
  const std::uint16_t u = seed::bits_of(__fsub_rn(a, b));
  const unsigned i = unsigned(u) - kExpWindowLo;
  return seed::from_bits(i < t.exp_window ? win[i] : __ldg(t.exp + u));
}

// The first element of head (b, h) of a view.
__device__ __forceinline__ const __nv_bfloat16* head_of(const View& v, int b, int h) { return v.ptr + b * v.sb + h * v.sh; }

// A packed pair of bf16 bits (lo in the low half) from two floats that are bf16 values.
__device__ __forceinline__ std::uint32_t pack_pair(float lo, float hi) { return flash::pack_bf16(lo, hi); }
__device__ __forceinline__ float pair_lo(std::uint32_t u) { return seed::from_bits(static_cast<std::uint16_t>(u & 0xffffu)); }
__device__ __forceinline__ float pair_hi(std::uint32_t u) { return seed::from_bits(static_cast<std::uint16_t>(u >> 16)); }

// The score of an MMA result: S = bf16(bf16(sum) alpha).
__device__ __forceinline__ float score_of(float sum, float alpha) { return bf(__fmul_rn(bf(sum), alpha)); }

// The four lanes of a quad (lane & ~3 ... + 3), each holding v: (v0 + v1) + (v2 + v3).
__device__ __forceinline__ float quad_sum_ordered(float v, int lane) {
  const int base = lane & ~3;
  const float v0 = __shfl_sync(0xffffffffu, v, base), v1 = __shfl_sync(0xffffffffu, v, base + 1),
              v2 = __shfl_sync(0xffffffffu, v, base + 2), v3 = __shfl_sync(0xffffffffu, v, base + 3);
  return __fadd_rn(__fadd_rn(v0, v1), __fadd_rn(v2, v3));
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ int quad_add(int v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// S and dP of a warp's 16 rows against a chunk's: s = A1 B1^T and dp = A2 B2^T from zero, in
// k16 steps over the feature index (KC of them). a1, a2: the lane's A addresses of the warp's rows
// (LaneFrag::a); b1, b2: its B addresses of the chunk (LaneFrag::b_nk); kRow bytes per row.
template <int KC, int NT, std::uint32_t kRow>
__device__ __forceinline__ void two_products(float (&s)[NT][4], float (&dp)[NT][4], std::uint32_t a1, std::uint32_t a2,
                                             std::uint32_t b1, std::uint32_t b2) {
  flash::zero_tiles(s);
  flash::zero_tiles(dp);
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) {
    std::uint32_t f1[4], f2[4];
    flash::ldmatrix_x4(f1, flash::chunk_xor(a1, kc));
    flash::ldmatrix_x4(f2, flash::chunk_xor(a2, kc));
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      std::uint32_t g1[4], g2[4];
      flash::ldmatrix_x4(g1, flash::chunk_xor(b1, kc) + np * 16 * kRow);
      flash::mma_bf16_pair(s, np, f1, g1);
      flash::ldmatrix_x4(g2, flash::chunk_xor(b2, kc) + np * 16 * kRow);
      flash::mma_bf16_pair(dp, np, f2, g2);
    }
  }
}

// A chunk of `Rows` rows of a (b, h) head into a swizzled tile (rows past n zero), cp.async.
template <int D, int Rows>
__device__ __forceinline__ void load_rows(__nv_bfloat16* dst, const View& x, int b, int h, int row0, int n) {
  flash::load_tile<D, Rows, kThreads>(dst, head_of(x, b, h), x.sn, row0, n);
}

}  // namespace lpdiag::cuda::seed_mma
