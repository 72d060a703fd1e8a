// Narrow floating-point formats (bf16, fp16, OCP FP8 e4m3/e5m2) as data, not as types, so one
// exact conversion routine serves all of them and the attention engine can switch at run time.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace lpdiag {

enum class FormatId { bf16, fp16, e4m3, e5m2 };

// How the all-ones exponent field is used.
enum class SpecialEncoding {
  ieee,          // all-ones exponent: mantissa 0 = Inf, otherwise NaN (bf16, fp16, e5m2)
  nan_only_max,  // no Inf; only S.1111.111 is NaN, the rest of that binade is finite (OCP e4m3)
};

struct FloatFormat {
  FormatId id;
  const char* name;
  int exponent_bits;
  int mantissa_bits;
  int bias;
  SpecialEncoding special;

  int total_bits() const { return 1 + exponent_bits + mantissa_bits; }
  int min_normal_exponent() const { return 1 - bias; }
  int max_exponent() const;      // unbiased exponent of the largest finite binade
  double max_finite() const;     // largest finite magnitude
  double min_normal() const;     // smallest positive normal
  double min_subnormal() const;  // smallest positive subnormal
  std::uint32_t sign_mask() const { return 1u << (exponent_bits + mantissa_bits); }
  std::uint32_t canonical_nan() const;  // the positive quiet NaN this library produces
  std::uint32_t inf_bits() const;       // +Inf pattern; only for formats that have Inf
  bool has_inf() const { return special == SpecialEncoding::ieee; }
};

const FloatFormat& format(FormatId id);
// Parses "bf16"/"bfloat16", "fp16"/"float16"/"half", "e4m3"/"fp8-e4m3", "e5m2"/"fp8-e5m2".
const FloatFormat& format_by_name(std::string_view name);

}  // namespace lpdiag
