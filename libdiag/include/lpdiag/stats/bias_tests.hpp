// Is a signed error biased? Two answers that fail differently: the z-score of the mean (sensitive
// to magnitude) and the sign test (robust to heavy tails, blind to magnitude).
#pragma once
#include <cstdint>

namespace lpdiag {

class ErrorAccumulator;

struct BiasResult {
  double mean = 0.0;
  double z = 0.0;          // mean / (s / sqrt(n)); +-Inf when every error is the same non-zero value
  double z_p = 1.0;        // two-sided normal p-value of z
  std::int64_t positive = 0;
  std::int64_t negative = 0;
  double sign_p = 1.0;     // two-sided exact binomial sign-test p-value (zeros excluded)
};

// z-score of the mean from count, sum and sum of squares (the trace stores exactly these).
double mean_z(std::int64_t count, double sum, double sumsq);
// Two-sided p-value of a standard normal deviate.
double normal_two_sided_p(double z);
// Two-sided exact sign test: P(|K - n/2| >= |k - n/2|) for K ~ Binomial(n, 1/2), n = pos + neg.
double sign_test_p(std::int64_t positive, std::int64_t negative);

BiasResult bias_test(const ErrorAccumulator& acc);

}  // namespace lpdiag
