#include <cmath>
#include <random>

#include "catch_compat.hpp"
#include "lpdiag/stats/bias_tests.hpp"
#include "lpdiag/stats/error_accumulator.hpp"

using namespace lpdiag;

TEST_CASE("z of the mean, closed form", "[stats]") {
  // values 1,2,3,4: mean 2.5, s^2 = 5/3, z = 2.5 / sqrt(5/12)
  CHECK(mean_z(4, 10.0, 30.0) == Catch::Approx(2.5 / std::sqrt(5.0 / 12.0)).epsilon(1e-14));
  CHECK(mean_z(3, 0.0, 2.0) == 0.0);
  CHECK(std::isinf(mean_z(5, -5.0, 5.0)));  // every error is -1: infinitely significant
  CHECK(mean_z(5, -5.0, 5.0) < 0);
  CHECK(std::isnan(mean_z(1, 1.0, 1.0)));
  CHECK(normal_two_sided_p(1.959963984540054) == Catch::Approx(0.05).epsilon(1e-12));
}

TEST_CASE("sign test p-values are the exact binomial tails", "[stats]") {
  CHECK(sign_test_p(10, 0) == Catch::Approx(2.0 / 1024.0).epsilon(1e-12));
  CHECK(sign_test_p(3, 7) == Catch::Approx(2.0 * 176.0 / 1024.0).epsilon(1e-12));
  CHECK(sign_test_p(5, 5) == 1.0);
  CHECK(sign_test_p(0, 0) == 1.0);
  CHECK(sign_test_p(0, 1) == 1.0);  // 2 * 1/2
  // Large n: compare with the normal approximation with continuity correction (error O(1/n)).
  const double n = 1e6, k = 499000;
  const double zc = (k + 0.5 - n / 2) / std::sqrt(n / 4);
  CHECK(sign_test_p(499000, 501000) == Catch::Approx(std::erfc(-zc / std::sqrt(2.0))).epsilon(1e-3));
}

TEST_CASE("bias test separates a biased error from a zero-mean one", "[stats]") {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> g(0.0, 1.0);
  ErrorAccumulator clean, biased;
  for (int i = 0; i < 100000; ++i) {
    const double e = g(rng);
    clean.add(e);
    biased.add(e + 0.05);
  }
  const BiasResult c = bias_test(clean), b = bias_test(biased);
  CHECK(std::fabs(c.z) < 4.5);  // fixed seed; |z| > 4.5 has probability 7e-6 under the null
  CHECK(b.z > 10.0);            // expected z = 0.05 * sqrt(1e5) = 15.8
  CHECK(b.sign_p < 1e-20);
  CHECK(b.positive > b.negative);
}
