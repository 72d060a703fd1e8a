// The `seed` policy's arithmetic on the device, operation for operation as the CPU engine's
// (libdiag/src/attention/tiled_head.hpp, Mode::seed; docs/reference/attention-numerics.md): every product
// and sum is an explicit round-to-nearest intrinsic (no FMA contraction), every dot product runs
// over the feature index in order, and exp and log, whose arguments are bf16 values in this
// policy, are read from tables the host fills with the CPU's own expf / logf (seed_tables.cu), so
// the kernels' results are the emulation's bit for bit.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "lpdiag/cuda/flash_attention.hpp"

namespace lpdiag::cuda::seed {

constexpr int kChunk = 64;             // keys (or query rows) staged in shared memory at a time
constexpr int kMaxKeyTile = 512;       // the paper's largest tile
constexpr float kBf16Max = 3.38953139e38f;
constexpr float kRowSumFloor = 1.00044417e-10f;  // bf16(1e-10): the paper's EPSILON

// The exp table's window the seed-mma kernels keep in shared memory: the bf16 bits [0xB800, 0xC300),
// x in (-128, -2^-15], where nearly every argument s - m of P-bar falls. The rest (x = 0 at the row
// max, positive x under the paper's shift, x <= -128) is read from global memory.
constexpr std::uint16_t kExpWindowLo = 0xB800;
constexpr unsigned kExpWindow = 0xC300 - 0xB800;  // 2,816 entries

struct Tables {
  const std::uint16_t* exp;  // [bf16 bits of x] -> bf16 bits of bf16(expf(x))
  const std::uint16_t* log;  // [bf16 bits of x] -> bf16 bits of bf16(logf(x))
  unsigned exp_window;       // seed-mma: entries of the window read from shared memory (kExpWindow, or 0: none)
};

__device__ __forceinline__ float bf(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
__device__ __forceinline__ std::uint16_t bits_of(float bf16_value) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(bf16_value));
}
__device__ __forceinline__ float from_bits(std::uint16_t b) { return __bfloat162float(__ushort_as_bfloat16(b)); }

// bf16(expf(bf16(a - b))): the policy's exp_diff.
__device__ __forceinline__ float exp_diff(const Tables& t, float a, float b) {
  return from_bits(__ldg(t.exp + bits_of(__fsub_rn(a, b))));
}
// bf16(logf(x)) for a bf16 value x.
__device__ __forceinline__ float log_bf(const Tables& t, float x) { return from_bits(__ldg(t.log + bits_of(x))); }

// S = bf16(bf16(sum_c q_c k_c) * alpha), the sum in fp32 from 0 in feature order.
template <int D>
__device__ __forceinline__ float score(const float* q, const float* k, float alpha) {
  float s = 0.f;
#pragma unroll 16
  for (int c = 0; c < D; ++c) s = __fadd_rn(s, __fmul_rn(q[c], k[c]));
  return bf(__fmul_rn(bf(s), alpha));
}

template <int D>
__device__ __forceinline__ float dot(const float* a, const float* b) {
  float s = 0.f;
#pragma unroll 16
  for (int c = 0; c < D; ++c) s = __fadd_rn(s, __fmul_rn(a[c], b[c]));
  return s;
}

// The backward's per-pair values: P = bf16(exp(bf16(S - L))), dS = bf16(bf16(P alpha) bf16(bf16(dP) - delta)).
struct PairGrad {
  float p, ds;
};
template <int D>
__device__ __forceinline__ PairGrad pair_grad(const Tables& t, const float* q, const float* k, const float* g, const float* v,
                                              float lse, float delta, float alpha) {
  const float s = score<D>(q, k, alpha);
  const float p = exp_diff(t, s, lse);
  const float dp = dot<D>(g, v);
  return {p, bf(__fmul_rn(bf(__fmul_rn(p, alpha)), bf(__fsub_rn(bf(dp), delta))))};
}

// Whole (b, h) views of the inputs, element strides as FlashArgs give them.
struct View {
  const __nv_bfloat16* ptr;
  std::int64_t sb, sh, sn;
  __device__ const __nv_bfloat16* row(int b, int h, int n) const { return ptr + b * sb + h * sh + std::int64_t(n) * sn; }
};

// Copies rows [r0, r0 + kChunk) of a (b, h) view (rows past N as zeros) into smem[kChunk][D] as floats.
template <int D>
__device__ __forceinline__ void stage_rows(float* smem, const View& x, int b, int h, int r0, int N) {
  for (int e = threadIdx.x; e < kChunk * D; e += blockDim.x) {
    const int r = e / D, c = e % D;
    smem[e] = r0 + r < N ? __bfloat162float(x.row(b, h, r0 + r)[c]) : 0.f;
  }
}

}  // namespace lpdiag::cuda::seed
