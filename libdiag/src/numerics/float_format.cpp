#include "lpdiag/numerics/float_format.hpp"

#include <cmath>
#include <string>

#include "lpdiag/error.hpp"

namespace lpdiag {
namespace {

// OCP 8-bit Floating Point Specification (OFP8) rev 1.0: E4M3 bias 7, no Inf, NaN = S.1111.111,
// max 448; E5M2 bias 15, IEEE-style Inf/NaN, max 57344.
constexpr FloatFormat kFormats[] = {
    {FormatId::bf16, "bf16", 8, 7, 127, SpecialEncoding::ieee},
    {FormatId::fp16, "fp16", 5, 10, 15, SpecialEncoding::ieee},
    {FormatId::e4m3, "e4m3", 4, 3, 7, SpecialEncoding::nan_only_max},
    {FormatId::e5m2, "e5m2", 5, 2, 15, SpecialEncoding::ieee},
};

}  // namespace

int FloatFormat::max_exponent() const {
  const int all_ones = (1 << exponent_bits) - 1;
  return (special == SpecialEncoding::ieee ? all_ones - 1 : all_ones) - bias;
}

double FloatFormat::max_finite() const {
  // In e4m3 the top binade loses its all-ones mantissa to NaN.
  const double top_mantissa = special == SpecialEncoding::ieee
                                  ? std::ldexp(1.0, mantissa_bits + 1) - 1.0
                                  : std::ldexp(1.0, mantissa_bits + 1) - 2.0;
  return std::ldexp(top_mantissa, max_exponent() - mantissa_bits);
}

double FloatFormat::min_normal() const { return std::ldexp(1.0, min_normal_exponent()); }

double FloatFormat::min_subnormal() const {
  return std::ldexp(1.0, min_normal_exponent() - mantissa_bits);
}

std::uint32_t FloatFormat::canonical_nan() const {
  const std::uint32_t exp_all = ((1u << exponent_bits) - 1u) << mantissa_bits;
  if (special == SpecialEncoding::nan_only_max) return exp_all | ((1u << mantissa_bits) - 1u);
  return exp_all | (1u << (mantissa_bits - 1));  // quiet bit set
}

std::uint32_t FloatFormat::inf_bits() const {
  if (!has_inf()) throw InvalidArgument(std::string("format ") + name + " has no infinity");
  return ((1u << exponent_bits) - 1u) << mantissa_bits;
}

const FloatFormat& format(FormatId id) { return kFormats[static_cast<int>(id)]; }

const FloatFormat& format_by_name(std::string_view name) {
  if (name == "bf16" || name == "bfloat16") return format(FormatId::bf16);
  if (name == "fp16" || name == "float16" || name == "half") return format(FormatId::fp16);
  if (name == "e4m3" || name == "fp8-e4m3" || name == "float8_e4m3fn") return format(FormatId::e4m3);
  if (name == "e5m2" || name == "fp8-e5m2" || name == "float8_e5m2") return format(FormatId::e5m2);
  throw InvalidArgument("unknown float format '" + std::string(name) +
                        "'; expected bf16, fp16, e4m3 or e5m2");
}

}  // namespace lpdiag
