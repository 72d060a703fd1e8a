#include <cmath>

#include "catch_compat.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/numerics/convert.hpp"

using namespace lpdiag;

TEST_CASE("format constants match the published definitions", "[numerics]") {
  CHECK(format(FormatId::bf16).max_finite() == 0x1.FEp127);
  CHECK(format(FormatId::bf16).min_subnormal() == 0x1p-133);
  CHECK(format(FormatId::fp16).max_finite() == 65504.0);
  CHECK(format(FormatId::fp16).min_subnormal() == 0x1p-24);
  CHECK(format(FormatId::e4m3).max_finite() == 448.0);
  CHECK(format(FormatId::e5m2).max_finite() == 57344.0);
  CHECK(format(FormatId::bf16).canonical_nan() == 0x7FC0u);
  CHECK(format(FormatId::fp16).canonical_nan() == 0x7E00u);
}

TEST_CASE("format names parse and unknown names say what is accepted", "[numerics]") {
  CHECK(format_by_name("bfloat16").id == FormatId::bf16);
  CHECK(format_by_name("fp8-e5m2").id == FormatId::e5m2);
  CHECK_THROWS_AS(format_by_name("fp7"), InvalidArgument);
}

TEST_CASE("every bf16 and fp16 bit pattern round-trips exactly", "[numerics]") {
  for (FormatId id : {FormatId::bf16, FormatId::fp16}) {
    const FloatFormat& f = format(id);
    int nan_patterns = 0;
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const double v = decode(b, f);
      if (std::isnan(v)) {
        ++nan_patterns;
        CHECK(is_nan_bits(encode(v, f), f));
        continue;
      }
      INFO(f.name << " pattern " << b);
      REQUIRE(encode(v, f) == b);
      if (id == FormatId::bf16) REQUIRE(bf16_bits_rne(static_cast<float>(v)) == b);
    }
    // 2 signs x (2^m - 1) non-zero mantissas with the all-ones exponent.
    CHECK(nan_patterns == 2 * ((1 << f.mantissa_bits) - 1));
  }
}

TEST_CASE("ulp and exact representability", "[numerics]") {
  const FloatFormat& bf = format(FormatId::bf16);
  CHECK(ulp(1.0, bf) == 0x1p-7);
  CHECK(ulp(-4.7, bf) == 0x1p-5);
  CHECK(ulp(0.0, bf) == 0x1p-133);
  CHECK(ulp(0x1p-140, bf) == 0x1p-133);  // subnormal range has the fixed spacing
  CHECK(std::isnan(ulp(INFINITY, bf)));
  CHECK(is_representable(-2.40625, bf));
  CHECK(is_representable(0x1p-133, bf));
  CHECK_FALSE(is_representable(1.0 + 0x1p-8, bf));
  CHECK_FALSE(is_representable(0x1p128, bf));
  CHECK_FALSE(is_representable(NAN, bf));
  CHECK(is_representable(448.0, format(FormatId::e4m3)));
  CHECK_FALSE(is_representable(480.0, format(FormatId::e4m3)));
}
