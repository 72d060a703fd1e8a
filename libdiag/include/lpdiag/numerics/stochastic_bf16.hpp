// Stochastic rounding of fp32 to bf16 with counter-based random bits, one definition for the
// CPU emulation and the CUDA kernels so both round every element the same way: element `index`
// under `seed` always gets the same 16 random bits, and |x| rounds up with probability equal
// to the discarded fraction of its last bf16 place (unbiased: E[sr(x)] = x).
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LPDIAG_HD __host__ __device__ __forceinline__
#else
#define LPDIAG_HD inline
#endif

namespace lpdiag {

// 32 well-mixed bits of (seed, index): a multiply-xorshift finaliser over a Weyl step.
LPDIAG_HD std::uint32_t sr_random_bits(std::uint32_t seed, std::uint64_t index) {
  std::uint64_t z = index * 0x9E3779B97F4A7C15ull + (static_cast<std::uint64_t>(seed) << 1 | 1u);
  z ^= z >> 31;
  z *= 0xD6E8FEB86659FD93ull;
  z ^= z >> 29;
  z *= 0xC2B2AE3D27D4EB4Full;
  z ^= z >> 32;
  return static_cast<std::uint32_t>(z);
}

// bf16 bits of x rounded stochastically with the low 16 bits of r (NaN stays a quiet NaN).
LPDIAG_HD std::uint16_t sr_bf16_bits(float x, std::uint32_t r) {
  std::uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  const std::uint32_t sign = u & 0x80000000u, mag = (u & 0x7FFFFFFFu) + (r & 0xFFFFu);  // the magnitude rounds up w.p. frac
  return static_cast<std::uint16_t>((sign | mag) >> 16);
}

}  // namespace lpdiag
