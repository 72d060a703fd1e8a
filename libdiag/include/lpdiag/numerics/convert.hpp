// Exact conversions between fp32/fp64 and the narrow formats of float_format.hpp.
//
// Every conversion rounds once, from the exact input value (fp32 widens to fp64 exactly), so a
// result is the correctly rounded value in the requested mode. Bit patterns are returned in the
// low bits of a uint32_t.
#pragma once
#include <cstdint>

#include "lpdiag/numerics/float_format.hpp"

namespace lpdiag {

enum class Rounding {
  nearest_even,  // IEEE round-to-nearest, ties to even
  toward_zero,   // truncation
  stochastic,    // round up with probability equal to the discarded fraction (seeded, counter based)
};

// What happens to finite values beyond the largest finite number, and to Inf.
enum class Overflow {
  ieee,        // nearest-even overflows to Inf (e4m3: NaN, it has no Inf); toward-zero clamps to max
  saturate,    // finite overflow and +-Inf clamp to +-max finite (OCP "saturation mode")
};

struct ConvertOptions {
  Rounding rounding = Rounding::nearest_even;
  Overflow overflow = Overflow::ieee;
  std::uint64_t seed = 0;     // stochastic rounding only
  std::uint64_t counter = 0;  // stochastic rounding only: the element index, so results are reproducible
};

std::uint32_t encode(double x, const FloatFormat& f, const ConvertOptions& opt = {});
double decode(std::uint32_t bits, const FloatFormat& f);

// Rounds x to the nearest value of f (as a double), with the given options.
inline double round_to(double x, const FloatFormat& f, const ConvertOptions& opt = {}) {
  return decode(encode(x, f, opt), f);
}

bool is_nan_bits(std::uint32_t bits, const FloatFormat& f);
bool is_inf_bits(std::uint32_t bits, const FloatFormat& f);

// The spacing of f at |x|: the value of one unit in the last place of the binade holding x
// (subnormal spacing below the normal range). NaN for NaN/Inf input.
double ulp(double x, const FloatFormat& f);
// True when x is exactly a finite value of f.
bool is_representable(double x, const FloatFormat& f);

// ---- bf16 fast path, used by the attention engine's inner loops ----
// Same result as encode(x, format(FormatId::bf16)) for every float (tested exhaustively on
// classes and on 1e8 random patterns); NaN becomes 0x7FC0 with the input's sign dropped.
inline std::uint16_t bf16_bits_rne(float x) {
  std::uint32_t u;
  __builtin_memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  const std::uint32_t lsb = (u >> 16) & 1u;
  u += 0x7FFFu + lsb;
  return static_cast<std::uint16_t>(u >> 16);
}
inline float bf16_to_float(std::uint16_t b) {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float x;
  __builtin_memcpy(&x, &u, 4);
  return x;
}
inline float round_bf16(float x) { return bf16_to_float(bf16_bits_rne(x)); }

}  // namespace lpdiag
