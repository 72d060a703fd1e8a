// Stochastic rounding to bf16 (numerics/stochastic_bf16.hpp): deterministic per (seed, index),
// always one of the two neighbouring bf16 values, and unbiased.
#include <cmath>
#include <cstdio>
#include <random>

#include "../catch_compat.hpp"
#include "lpdiag/numerics/convert.hpp"
#include "lpdiag/numerics/stochastic_bf16.hpp"
#include "test_seed.hpp"

using namespace lpdiag;

TEST_CASE("stochastic bf16: neighbours only, deterministic, unbiased", "[numerics][sr]") {
  const std::uint64_t seed = lpdiag_test::seed("test_stochastic_bf16#16", 1126707u);
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int t = 0; t < 200; ++t) {
    const float x = u(rng);
    // Mean over 20000 indices vs x; the SR error of one rounding is at most one bf16 place q, so
    // its mean over n draws has standard deviation <= q / (2 sqrt(n)); allow 5 of those.
    const double q = ulp(x, format(FormatId::bf16));
    double sum = 0;
    const int n = 20000;
    const auto s32 = static_cast<std::uint32_t>(rng());
    for (int i = 0; i < n; ++i) {
      const float r = bf16_to_float(sr_bf16_bits(x, sr_random_bits(s32, static_cast<std::uint64_t>(i))));
      REQUIRE(std::fabs(static_cast<double>(r) - x) < q);  // one of the two neighbours
      REQUIRE(r == bf16_to_float(sr_bf16_bits(x, sr_random_bits(s32, static_cast<std::uint64_t>(i)))));
      sum += r;
    }
    CHECK(std::fabs(sum / n - x) <= 5 * q / (2 * std::sqrt(static_cast<double>(n))));
  }
  // Exact values are never moved; NaN stays NaN; the sign is kept.
  CHECK(bf16_to_float(sr_bf16_bits(1.5f, 0xFFFFu)) == 1.5f);
  CHECK(bf16_to_float(sr_bf16_bits(-1.5f, 0xFFFFu)) == -1.5f);
  CHECK(std::isnan(bf16_to_float(sr_bf16_bits(std::nanf(""), 0u))));
}
