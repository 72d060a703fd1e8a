#include <cmath>
#include <random>
#include <vector>

#include "catch_compat.hpp"
#include "lpdiag/stats/error_accumulator.hpp"
#include "test_seed.hpp"

using namespace lpdiag;

TEST_CASE("accumulator closed-form values", "[stats]") {
  ErrorAccumulator a;
  for (double e : {3.0, -1.0, 0.0, 2.0, -4.0, 5.0}) a.add(e);
  CHECK(a.count() == 6);
  CHECK(a.sum() == 5.0);
  CHECK(a.sumsq() == 55.0);
  CHECK(a.positive() == 3);
  CHECK(a.negative() == 2);
  CHECK(a.min() == -4.0);
  CHECK(a.max() == 5.0);
  CHECK(a.mean() == Catch::Approx(5.0 / 6.0).epsilon(1e-15));
  CHECK(a.variance() == Catch::Approx((55.0 - 25.0 / 6.0) / 5.0).epsilon(1e-15));
}

TEST_CASE("non-finite errors are counted apart and do not poison the sums", "[stats]") {
  ErrorAccumulator a;
  a.add(1.0);
  a.add(NAN);
  a.add(INFINITY);
  a.add(-3.0);
  CHECK(a.count() == 2);
  CHECK(a.nonfinite() == 2);
  CHECK(a.sum() == -2.0);
}

TEST_CASE("compensated sum keeps what a naive fp64 sum loses", "[stats]") {
  CompensatedSum s;
  double naive = 0.0;
  s.add(1e16);
  naive += 1e16;
  for (int i = 0; i < 1000; ++i) {
    s.add(1.0);
    naive += 1.0;
  }
  s.add(-1e16);
  naive -= 1e16;
  CHECK(s.value() == 1000.0);
  CHECK(naive != 1000.0);
}

TEST_CASE("1e7 values: streaming agrees with two-pass fp64, and parallel merge with serial", "[stats]") {
  const std::uint64_t seed = lpdiag_test::seed("test_error_accumulator#6", 1047517u);
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  // Errors like attention's: tiny, biased, with a heavy tail.
  std::normal_distribution<double> g(3e-4, 1e-2);
  std::cauchy_distribution<double> tail(0.0, 1e-3);
  std::vector<double> x(10'000'000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = (i % 97 == 0) ? tail(rng) : g(rng);

  ErrorAccumulator serial;
  for (double v : x) serial.add(v);
  const int parts = 8;
  std::vector<ErrorAccumulator> part(parts);
  for (std::size_t i = 0; i < x.size(); ++i) part[i % parts].add(x[i]);
  ErrorAccumulator merged;
  for (auto& p : part) merged.merge(p);

  // Two-pass reference in long double (64-bit significand on x86) so it is the more accurate.
  long double s = 0;
  for (double v : x) s += v;
  const long double mean = s / x.size();
  long double m2 = 0;
  for (double v : x) m2 += (v - mean) * (v - mean);
  const double ref_mean = static_cast<double>(mean);
  const double ref_var = static_cast<double>(m2 / (x.size() - 1));

  // Tolerances: the compensated mean is good to a few ulps; the variance comes from
  // sumsq - sum^2/n, which loses log2(sumsq / (n var)) bits (here under 1) to cancellation,
  // so 1e-12 relative leaves a wide margin while a plain float sum would miss it.
  CHECK(serial.mean() == Catch::Approx(ref_mean).epsilon(1e-13));
  CHECK(serial.variance() == Catch::Approx(ref_var).epsilon(1e-12));
  CHECK(merged.count() == serial.count());
  CHECK(merged.positive() == serial.positive());
  CHECK(merged.negative() == serial.negative());
  CHECK(merged.min() == serial.min());
  CHECK(merged.max() == serial.max());
  // The merged double-double equals the serial one up to its final rounding: 1 ulp.
  CHECK(std::fabs(merged.sum() - serial.sum()) <= std::nextafter(std::fabs(serial.sum()), INFINITY) - std::fabs(serial.sum()));
  CHECK(std::fabs(merged.sumsq() - serial.sumsq()) <= std::nextafter(serial.sumsq(), INFINITY) - serial.sumsq());
}
