#include "lpdiag/numerics/convert.hpp"

#include <cmath>

namespace lpdiag {
namespace {

std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A uniform double in [0, 1) that depends only on (seed, counter): stochastic rounding is then
// reproducible and independent of thread scheduling.
double uniform01(std::uint64_t seed, std::uint64_t counter) {
  const std::uint64_t r = splitmix64(seed ^ splitmix64(counter + 0x632BE59BD9B4E019ull));
  return static_cast<double>(r >> 11) * 0x1.0p-53;
}

std::uint32_t max_finite_bits(const FloatFormat& f) {
  const std::uint32_t exp_field = static_cast<std::uint32_t>(f.max_exponent() + f.bias);
  std::uint32_t mant = (1u << f.mantissa_bits) - 1u;
  if (f.special == SpecialEncoding::nan_only_max) mant -= 1u;
  return (exp_field << f.mantissa_bits) | mant;
}

std::uint32_t overflow_bits(const FloatFormat& f, const ConvertOptions& opt, std::uint32_t sign) {
  if (opt.overflow == Overflow::saturate || opt.rounding == Rounding::toward_zero)
    return sign | max_finite_bits(f);
  if (f.has_inf()) return sign | f.inf_bits();
  return sign | f.canonical_nan();  // e4m3 has no Inf: non-saturating overflow is NaN
}

}  // namespace

std::uint32_t encode(double x, const FloatFormat& f, const ConvertOptions& opt) {
  const std::uint32_t sign = std::signbit(x) ? f.sign_mask() : 0u;
  if (std::isnan(x)) return f.canonical_nan();
  if (std::isinf(x)) {
    if (opt.overflow == Overflow::saturate) return sign | max_finite_bits(f);
    return f.has_inf() ? (sign | f.inf_bits()) : f.canonical_nan();
  }
  const double a = std::fabs(x);
  if (a == 0.0) return sign;

  const int m = f.mantissa_bits;
  const int emin = f.min_normal_exponent();
  const int e = std::ilogb(a);
  const int quantum_exp = (e < emin ? emin : e) - m;
  const double q = std::ldexp(a, -quantum_exp);  // exact: a scaled by a power of two
  double n = std::floor(q);
  const double frac = q - n;  // exact
  switch (opt.rounding) {
    case Rounding::nearest_even:
      if (frac > 0.5 || (frac == 0.5 && std::fmod(n, 2.0) != 0.0)) n += 1.0;
      break;
    case Rounding::toward_zero:
      break;
    case Rounding::stochastic:
      if (frac > 0.0 && uniform01(opt.seed, opt.counter) < frac) n += 1.0;
      break;
  }
  const double value = std::ldexp(n, quantum_exp);
  if (value > f.max_finite()) return overflow_bits(f, opt, sign);
  if (value == 0.0) return sign;

  const int ve = std::ilogb(value);
  if (ve < emin) return sign | static_cast<std::uint32_t>(std::ldexp(value, m - emin));
  const auto exp_field = static_cast<std::uint32_t>(ve + f.bias);
  const auto mant = static_cast<std::uint32_t>(std::ldexp(value, m - ve) - std::ldexp(1.0, m));
  return sign | (exp_field << m) | mant;
}

bool is_nan_bits(std::uint32_t bits, const FloatFormat& f) {
  const std::uint32_t exp_all = (1u << f.exponent_bits) - 1u;
  const std::uint32_t exp_field = (bits >> f.mantissa_bits) & exp_all;
  const std::uint32_t mant = bits & ((1u << f.mantissa_bits) - 1u);
  if (f.special == SpecialEncoding::nan_only_max)
    return exp_field == exp_all && mant == (1u << f.mantissa_bits) - 1u;
  return exp_field == exp_all && mant != 0;
}

bool is_inf_bits(std::uint32_t bits, const FloatFormat& f) {
  if (!f.has_inf()) return false;
  return (bits & ~f.sign_mask()) == f.inf_bits();
}

double decode(std::uint32_t bits, const FloatFormat& f) {
  const bool negative = (bits & f.sign_mask()) != 0;
  const std::uint32_t exp_all = (1u << f.exponent_bits) - 1u;
  const std::uint32_t exp_field = (bits >> f.mantissa_bits) & exp_all;
  const std::uint32_t mant = bits & ((1u << f.mantissa_bits) - 1u);
  double v;
  if (is_nan_bits(bits, f)) {
    v = std::nan("");
  } else if (is_inf_bits(bits, f)) {
    v = HUGE_VAL;
  } else if (exp_field == 0) {
    v = std::ldexp(static_cast<double>(mant), f.min_normal_exponent() - f.mantissa_bits);
  } else {
    const double significand = std::ldexp(1.0, f.mantissa_bits) + mant;
    v = std::ldexp(significand, static_cast<int>(exp_field) - f.bias - f.mantissa_bits);
  }
  return negative ? -v : v;
}

double ulp(double x, const FloatFormat& f) {
  if (!std::isfinite(x)) return std::nan("");
  const double a = std::fabs(x);
  const int emin = f.min_normal_exponent();
  const int e = a == 0.0 ? emin : std::ilogb(a);
  return std::ldexp(1.0, (e < emin ? emin : e) - f.mantissa_bits);
}

bool is_representable(double x, const FloatFormat& f) {
  if (!std::isfinite(x)) return false;
  return round_to(x, f) == x;
}

}  // namespace lpdiag
