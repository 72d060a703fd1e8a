// When an fp32 exponential may stand in for the seed policy's exp table: the table holds
// bf16(glibc expf(x)) for every bf16 x; the seed-mma kernels compute CUDA's expf(x) instead and
// round it to bf16 where that must give the table's value. CUDA's expf is within 2 ulps of e^x
// (CUDA Math API, full range), glibc's within 0.502, so the two are at most 2.502 ulps apart: if
// CUDA's result y is more than 4 ulps (in its low 16 bits) from a bf16 rounding midpoint, both
// round to the same bf16. Arguments outside [-80, 80] (results near the subnormal range or
// overflow) always take the table. One definition for the kernels and the test that checks the
// argument on every bf16 input (tests/numerics/test_bf16_exp_shortcut.cpp).
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LPDIAG_EXP_HD __host__ __device__ __forceinline__
#else
#define LPDIAG_EXP_HD inline
#endif

namespace lpdiag {

constexpr float kBf16ExpShortcutRange = 80.f;  // |x| beyond it: the table
constexpr std::uint32_t kBf16ExpShortcutUlps = 4;  // the distance from a midpoint that is safe

// True when y (an fp32 exp result within 2 ulps of e^x) rounds to bf16 as any value within
// 2.502 ulps of it does.
LPDIAG_EXP_HD bool bf16_exp_shortcut_safe(float y) {
  std::uint32_t u;
  std::memcpy(&u, &y, 4);
  const std::uint32_t low = u & 0xffffu;
  return low + kBf16ExpShortcutUlps < 0x8000u || low > 0x8000u + kBf16ExpShortcutUlps;
}

}  // namespace lpdiag
