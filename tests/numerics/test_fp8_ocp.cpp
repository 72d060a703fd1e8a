// The values the OCP 8-bit Floating Point Specification (OFP8, rev 1.0) lists for E4M3 and E5M2.
#include <cmath>

#include "catch_compat.hpp"
#include "lpdiag/numerics/convert.hpp"

using namespace lpdiag;

TEST_CASE("E4M3 decodes the OCP table values", "[numerics][fp8]") {
  const FloatFormat& f = format(FormatId::e4m3);
  CHECK(decode(0b0'1111'110, f) == 448.0);            // max normal S.1111.110
  CHECK(decode(0b1'1111'110, f) == -448.0);
  CHECK(decode(0b0'0001'000, f) == 0x1p-6);           // min normal
  CHECK(decode(0b0'0000'111, f) == 0.875 * 0x1p-6);   // max subnormal
  CHECK(decode(0b0'0000'001, f) == 0x1p-9);           // min subnormal
  CHECK(decode(0b0'0000'000, f) == 0.0);
  CHECK(std::signbit(decode(0b1'0000'000, f)));
  CHECK(std::isnan(decode(0b0'1111'111, f)));         // NaN: S.1111.111, both signs
  CHECK(std::isnan(decode(0b1'1111'111, f)));
  CHECK(decode(0b0'1111'000, f) == 256.0);            // the top binade is finite (no Inf)
  int nans = 0;
  for (std::uint32_t b = 0; b < 256; ++b) nans += std::isnan(decode(b, f));
  CHECK(nans == 2);
}

TEST_CASE("E5M2 decodes the OCP table values", "[numerics][fp8]") {
  const FloatFormat& f = format(FormatId::e5m2);
  CHECK(decode(0b0'11110'11, f) == 57344.0);  // max normal
  CHECK(decode(0b0'00001'00, f) == 0x1p-14);  // min normal
  CHECK(decode(0b0'00000'11, f) == 0.75 * 0x1p-14);
  CHECK(decode(0b0'00000'01, f) == 0x1p-16);
  CHECK(decode(0b0'11111'00, f) == INFINITY);
  CHECK(decode(0b1'11111'00, f) == -INFINITY);
  for (std::uint32_t m : {1u, 2u, 3u}) CHECK(std::isnan(decode((0b11111u << 2) | m, f)));
}

TEST_CASE("FP8 conversion: nearest-even, saturation and NaN rules", "[numerics][fp8]") {
  const FloatFormat& e4 = format(FormatId::e4m3);
  const FloatFormat& e5 = format(FormatId::e5m2);
  const ConvertOptions sat{Rounding::nearest_even, Overflow::saturate};
  CHECK(encode(464.0, e4) == 0b0'1111'110);      // tie between 448 and 480: even mantissa (448)
  CHECK(is_nan_bits(encode(464.5, e4), e4));     // non-saturating overflow: NaN (no Inf)
  CHECK(encode(464.5, e4, sat) == 0b0'1111'110); // saturating: max
  CHECK(encode(-1e6, e4, sat) == 0b1'1111'110);
  CHECK(encode(INFINITY, e4, sat) == 0b0'1111'110);
  CHECK(is_nan_bits(encode(INFINITY, e4), e4));
  CHECK(is_nan_bits(encode(NAN, e4, sat), e4));  // NaN stays NaN in either mode
  CHECK(encode(61440.0, e5) == 0b0'11111'00);    // tie between 57344 (odd) and 65536: Inf
  CHECK(encode(61439.0, e5) == 0b0'11110'11);
  CHECK(encode(61440.0, e5, sat) == 0b0'11110'11);
  CHECK(is_nan_bits(encode(NAN, e5), e5));
  CHECK(encode(0x1p-10, e4) == 0u);              // half the min subnormal: tie to zero
  CHECK(encode(0x1.8p-10, e4) == 1u);
  CHECK(encode(0.3, e4) == 0b0'0101'010);        // 0.3 -> 0.3125 = 1.25 * 2^-2
  CHECK(decode(encode(0.3, e4), e4) == 0.3125);
  // Every finite pattern of both formats round-trips.
  for (const FloatFormat* f : {&e4, &e5})
    for (std::uint32_t b = 0; b < 256; ++b) {
      const double v = decode(b, *f);
      if (!std::isnan(v)) REQUIRE(encode(v, *f) == b);
    }
}
