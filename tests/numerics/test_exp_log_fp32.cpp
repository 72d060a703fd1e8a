// exp_fp32 / log_fp32 (the fp32 policy's exp and log, shared by the CPU engine and the CUDA
// kernels) against the correctly rounded result, taken from the x87's 64-bit-mantissa expl /
// logl rounded to fp32 (its own error, ~1e-19, can flip a rounding only within 1e-19 of a
// midpoint). Tolerance: at most 1 in 10^5 of the inputs may differ from correct rounding, and
// then by one ulp only: the double evaluation is within ~4e-16 of the exact value, so a
// difference needs e^x within that distance of a midpoint between floats (rate ~1e-8).
// Inputs: a fixed seed (printed; LPDIAG_TEST_SEED=fresh draws another) over the whole finite range where the result is neither 0 nor
// inf nor exact, plus adversarial ones: around the overflow and underflow limits, the subnormal
// results, integers, powers of two, and tiny arguments where e^x rounds to 1 +- an ulp.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "catch_compat.hpp"
#include "lpdiag/numerics/exp_log_fp32.hpp"
#include "test_seed.hpp"

using namespace lpdiag;

namespace {
std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
long long ulps(float a, float b) { return std::llabs(static_cast<long long>(bits(a)) - static_cast<long long>(bits(b))); }

struct Tally {
  long long n = 0, off = 0, worst = 0;
  void add(float got, float want) {
    ++n;
    const long long u = ulps(got, want);
    off += u != 0;
    worst = std::max(worst, u);
  }
};
}  // namespace

TEST_CASE("exp_fp32 is correctly rounded but for rare midpoints", "[numerics][fp32]") {
  const std::uint64_t seed = lpdiag_test::seed("test_exp_log_fp32#14", 1110869u);
  INFO("seed " << seed);
  std::printf("exp_fp32: seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 g(seed);
  std::vector<float> xs;
  std::uniform_real_distribution<float> wide(-103.9f, 88.7f), near0(-1e-3f, 1e-3f);
  for (int i = 0; i < 400000; ++i) xs.push_back(wide(g)), xs.push_back(near0(g));
  for (float edge : {88.72283f, -87.33654f, -103.27893f, -103.9720f, 0.f, 1.f, -1.f})
    for (int k = -2000; k <= 2000; ++k) {
      std::uint32_t u = bits(edge) + static_cast<std::uint32_t>(k);
      float x;
      std::memcpy(&x, &u, 4);
      xs.push_back(x);
    }
  for (int k = -60; k <= 6; ++k) xs.push_back(std::ldexp(1.f, k)), xs.push_back(-std::ldexp(1.f, k));
  for (int k = -103; k <= 88; ++k) xs.push_back(static_cast<float>(k));
  Tally t;
  for (float x : xs) {
    if (!std::isfinite(x)) continue;
    t.add(exp_fp32(x), static_cast<float>(expl(static_cast<long double>(x))));
  }
  std::printf("exp_fp32: %lld inputs, %lld not correctly rounded, worst %lld ulp\n", t.n, t.off, t.worst);
  CHECK(t.worst <= 1);
  CHECK(t.off * 100000 <= t.n);
  CHECK(exp_fp32(0.f) == 1.f);
  CHECK(exp_fp32(-std::numeric_limits<float>::infinity()) == 0.f);
  CHECK(exp_fp32(std::numeric_limits<float>::infinity()) == std::numeric_limits<float>::infinity());
  CHECK(exp_fp32(89.f) == std::numeric_limits<float>::infinity());
  CHECK(exp_fp32(-200.f) == 0.f);
  CHECK(std::isnan(exp_fp32(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("log_fp32 is correctly rounded but for rare midpoints", "[numerics][fp32]") {
  const std::uint64_t seed = lpdiag_test::seed("test_exp_log_fp32#15", 1118788u);
  INFO("seed " << seed);
  std::printf("log_fp32: seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<std::uint32_t> any(1u, 0x7F7FFFFFu);  // every positive finite float, subnormals included
  std::vector<float> xs;
  for (int i = 0; i < 800000; ++i) {
    const std::uint32_t u = any(g);
    float x;
    std::memcpy(&x, &u, 4);
    xs.push_back(x);
  }
  for (float edge : {1.f, 1.41421354f, 0.707106769f, 2.f, 1.17549435e-38f, 1e-45f})
    for (int k = -2000; k <= 2000; ++k) {
      std::uint32_t u = bits(edge) + static_cast<std::uint32_t>(k);
      float x;
      std::memcpy(&x, &u, 4);
      if (x > 0) xs.push_back(x);
    }
  for (int k = 1; k <= 4096; ++k) xs.push_back(static_cast<float>(k));  // row sums
  Tally t;
  for (float x : xs) t.add(log_fp32(x), static_cast<float>(logl(static_cast<long double>(x))));
  std::printf("log_fp32: %lld inputs, %lld not correctly rounded, worst %lld ulp\n", t.n, t.off, t.worst);
  CHECK(t.worst <= 1);
  CHECK(t.off * 100000 <= t.n);
  CHECK(log_fp32(1.f) == 0.f);
  CHECK(log_fp32(0.f) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(log_fp32(-1.f)));
  CHECK(log_fp32(std::numeric_limits<float>::infinity()) == std::numeric_limits<float>::infinity());
}
