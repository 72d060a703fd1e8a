#include "lpdiag/attention/reference.hpp"

#include <cmath>
#include <limits>

namespace lpdiag {

ReferenceAttention reference_attention(const double* q, const double* k, const double* v, const double* dout,
                                       std::int64_t N, std::int64_t d, double scale, bool causal) {
  ReferenceAttention r;
  const auto n = static_cast<std::size_t>(N), dd = static_cast<std::size_t>(d);
  r.o.assign(n * dd, 0.0);
  r.lse.assign(n, 0.0);
  r.delta.assign(n, 0.0);
  r.dq.assign(n * dd, 0.0);
  r.dk.assign(n * dd, 0.0);
  r.dv.assign(n * dd, 0.0);
  std::vector<double> s(n), p(n), dp(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t nk = causal ? i + 1 : n;
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < nk; ++j) {
      double acc = 0;
      for (std::size_t c = 0; c < dd; ++c) acc += q[i * dd + c] * k[j * dd + c];
      s[j] = scale * acc;
      m = std::max(m, s[j]);
    }
    double l = 0;
    for (std::size_t j = 0; j < nk; ++j) l += std::exp(s[j] - m);
    r.lse[i] = m + std::log(l);
    for (std::size_t j = 0; j < nk; ++j) {
      p[j] = std::exp(s[j] - r.lse[i]);
      for (std::size_t c = 0; c < dd; ++c) r.o[i * dd + c] += p[j] * v[j * dd + c];
    }
    double delta = 0;
    for (std::size_t c = 0; c < dd; ++c) delta += dout[i * dd + c] * r.o[i * dd + c];
    r.delta[i] = delta;
    for (std::size_t j = 0; j < nk; ++j) {
      double acc = 0;
      for (std::size_t c = 0; c < dd; ++c) acc += dout[i * dd + c] * v[j * dd + c];
      dp[j] = acc;
      const double ds = p[j] * (dp[j] - delta);
      for (std::size_t c = 0; c < dd; ++c) {
        r.dv[j * dd + c] += p[j] * dout[i * dd + c];
        r.dq[i * dd + c] += scale * ds * k[j * dd + c];
        r.dk[j * dd + c] += scale * ds * q[i * dd + c];
      }
    }
  }
  return r;
}

}  // namespace lpdiag
