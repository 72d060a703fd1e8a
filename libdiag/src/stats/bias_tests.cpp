#include "lpdiag/stats/bias_tests.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "lpdiag/stats/error_accumulator.hpp"

namespace lpdiag {

double mean_z(std::int64_t count, double sum, double sumsq) {
  if (count < 2 || !std::isfinite(sum) || !std::isfinite(sumsq)) return std::nan("");
  const double n = static_cast<double>(count);
  const double mean = sum / n;
  const double var = std::max(0.0, (sumsq - sum * mean)) / (n - 1.0);
  if (var == 0.0) {
    if (mean == 0.0) return 0.0;
    return mean > 0 ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  }
  return mean / std::sqrt(var / n);
}

double normal_two_sided_p(double z) {
  if (std::isnan(z)) return std::nan("");
  return std::erfc(std::fabs(z) / std::sqrt(2.0));
}

double sign_test_p(std::int64_t positive, std::int64_t negative) {
  const std::int64_t n = positive + negative;
  if (n == 0) return 1.0;
  const std::int64_t k = std::min(positive, negative);
  if (2 * k == n) return 1.0;
  // P(K <= k) summed in log space from k downwards; terms fall at least geometrically once below
  // the mode, so the loop stops after O(sqrt(n)) terms at worst.
  const double nd = static_cast<double>(n);
  const double log_half_n = nd * std::log(0.5);
  auto log_term = [&](double j) {
    return std::lgamma(nd + 1.0) - std::lgamma(j + 1.0) - std::lgamma(nd - j + 1.0) + log_half_n;
  };
  const double top = log_term(static_cast<double>(k));
  double rel = 0.0;  // sum of exp(log_term(j) - top)
  double term = 1.0;
  for (std::int64_t j = k; j >= 0; --j) {
    rel += term;
    if (j == 0) break;
    // term(j-1)/term(j) = j / (n - j + 1)
    term *= static_cast<double>(j) / (nd - static_cast<double>(j) + 1.0);
    if (term < 1e-18 * rel) break;
  }
  const double tail = std::exp(top + std::log(rel));
  return std::min(1.0, 2.0 * tail);
}

BiasResult bias_test(const ErrorAccumulator& acc) {
  BiasResult r;
  r.mean = acc.mean();
  r.z = mean_z(acc.count(), acc.sum(), acc.sumsq());
  r.z_p = normal_two_sided_p(r.z);
  r.positive = acc.positive();
  r.negative = acc.negative();
  r.sign_p = sign_test_p(r.positive, r.negative);
  return r;
}

}  // namespace lpdiag
