#include <cmath>
#include <cstring>
#include <random>

#include "catch_compat.hpp"
#include "lpdiag/numerics/convert.hpp"

using namespace lpdiag;

namespace {
float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

TEST_CASE("the paper's worked example rounds away from zero", "[numerics][paper]") {
  const FloatFormat& bf = format(FormatId::bf16);
  // Two same-sign bf16 values of one binade whose exact sum is a tie at the result's exponent.
  const double a = -2.40625, b = -2.296875;
  REQUIRE(is_representable(a, bf));
  REQUIRE(is_representable(b, bf));
  const double tie = a + b;  // -4.703125 = -150.5 ulps of 2^-5
  CHECK(tie / ulp(tie, bf) == -150.5);
  CHECK(round_to(tie, bf) == -4.6875);  // alone, the tie goes to even (150)
  // A same-sign residual of ~0.00087 decides the tie, away from zero.
  const double exact = -4.703990459442139;
  CHECK(round_to(exact, bf) == -4.71875);
  CHECK(round_to(exact, bf) - exact == Catch::Approx(-0.014759540557861).epsilon(1e-9));
  CHECK(round_bf16(static_cast<float>(exact)) == -4.71875f);
}

TEST_CASE("fp32 -> bf16 nearest-even: every tie and boundary class, generic vs fast path", "[numerics]") {
  const FloatFormat& bf = format(FormatId::bf16);
  // For every upper half (sign, exponent, 7 mantissa bits), the lower halves that decide the
  // rounding: exact, just above zero, just below the tie, the tie, just above, all ones.
  const std::uint32_t lows[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
  for (std::uint32_t hi = 0; hi < 65536; ++hi) {
    for (std::uint32_t lo : lows) {
      const float x = from_bits((hi << 16) | lo);
      const std::uint32_t generic = encode(static_cast<double>(x), bf);
      const std::uint16_t fast = bf16_bits_rne(x);
      if (std::isnan(x)) {
        REQUIRE(fast == 0x7FC0);
        REQUIRE(generic == 0x7FC0u);
        continue;
      }
      INFO("pattern 0x" << std::hex << ((hi << 16) | lo));
      REQUIRE(generic == fast);
      const std::uint32_t odd = hi & 1u;
      const std::uint32_t expect_up = lo > 0x8000 || (lo == 0x8000 && odd);
      // Patterns whose upper half is the largest finite overflow to Inf when rounding up.
      REQUIRE(fast == static_cast<std::uint16_t>(hi + expect_up));
    }
  }
}

TEST_CASE("fp64 conversion rounds once, not through fp32", "[numerics]") {
  const FloatFormat& bf = format(FormatId::bf16);
  const double x = 1.0 + 0x1p-8 + 0x1p-30;  // just above a bf16 tie; fp32 would drop 2^-30
  CHECK(round_to(x, bf) == 1.0 + 0x1p-7);
  CHECK(round_to(static_cast<double>(static_cast<float>(x)), bf) == 1.0);  // double rounding
}

TEST_CASE("NaN, infinities, overflow and subnormals", "[numerics]") {
  const FloatFormat& bf = format(FormatId::bf16);
  const FloatFormat& h = format(FormatId::fp16);
  CHECK(encode(INFINITY, bf) == 0x7F80u);
  CHECK(encode(-INFINITY, bf) == 0xFF80u);
  CHECK(encode(NAN, bf) == 0x7FC0u);
  CHECK(encode(-0.0, bf) == 0x8000u);
  CHECK(encode(0x1.FFp127, bf) == 0x7F80u);  // beyond max + half ulp: Inf
  CHECK(encode(0x1.FFp127, bf, {Rounding::toward_zero}) == 0x7F7Fu);
  CHECK(encode(1e39, bf, {Rounding::nearest_even, Overflow::saturate}) == 0x7F7Fu);
  CHECK(encode(-INFINITY, bf, {Rounding::nearest_even, Overflow::saturate}) == 0xFF7Fu);
  CHECK(encode(65520.0, h) == 0x7C00u);   // tie between 65504 (odd) and 2^16: even is Inf
  CHECK(encode(65519.99, h) == 0x7BFFu);
  CHECK(encode(0x1p-134, bf) == 0u);        // tie between 0 and min subnormal: even is 0
  CHECK(encode(0x1.8p-134, bf) == 1u);
  CHECK(encode(0x1p-25, h) == 0u);
  CHECK(encode(0x1.0000001p-25, h) == 1u);
  CHECK(decode(0x0001u, h) == 0x1p-24);
  CHECK(decode(0x0001u, bf) == 0x1p-133);
  CHECK(std::isinf(decode(0x7C00u, h)));
  // Rounding up from the largest subnormal lands on the smallest normal.
  CHECK(encode(0x1.FFp-127, bf) == 0x0080u);
}

TEST_CASE("toward-zero truncates in both signs", "[numerics]") {
  const FloatFormat& bf = format(FormatId::bf16);
  const ConvertOptions rtz{Rounding::toward_zero};
  CHECK(round_to(1.0 + 0x1.FFp-8, bf, rtz) == 1.0);
  CHECK(round_to(-(1.0 + 0x1.FFp-8), bf, rtz) == -1.0);
  CHECK(round_to(1.0 + 0x1.FFp-8, bf) == 1.0 + 0x1p-7);
}

TEST_CASE("stochastic rounding is reproducible, picks a neighbour and is unbiased", "[numerics]") {
  const FloatFormat& bf = format(FormatId::bf16);
  std::mt19937_64 rng(20261130);
  std::uniform_real_distribution<double> U(-8.0, 8.0);
  for (int t = 0; t < 20; ++t) {
    const double x = U(rng);
    const double lo = round_to(x, bf, {Rounding::toward_zero});
    const double up = lo + std::copysign(ulp(x, bf), x);
    double sum = 0.0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
      ConvertOptions sr{Rounding::stochastic, Overflow::ieee, 42, static_cast<std::uint64_t>(i)};
      const double r = round_to(x, bf, sr);
      REQUIRE((r == lo || r == up));
      REQUIRE(r == round_to(x, bf, sr));  // same (seed, counter): same result
      sum += r - x;
    }
    // Each error lies in (-ulp, ulp), so its s.d. is at most ulp; 5 s.d. of the mean bounds a
    // false failure at ~6e-7 per case.
    const double tol = 5.0 * ulp(x, bf) / std::sqrt(static_cast<double>(n));
    CHECK(std::fabs(sum / n) < tol);
  }
}
