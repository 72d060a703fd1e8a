#include <cmath>
#include <random>

#include "catch_compat.hpp"
#include "lpdiag/attention/reference.hpp"
#include "test_seed.hpp"

using namespace lpdiag;

TEST_CASE("fp64 reference gradients agree with central finite differences", "[attention][reference]") {
  std::mt19937_64 rng(lpdiag_test::seed("test_reference#7", 1055436u));
  std::normal_distribution<double> g;
  for (bool causal : {false, true}) {
    const std::int64_t N = 7, d = 5;
    std::vector<double> q(N * d), k(N * d), v(N * d), dout(N * d);
    for (auto* x : {&q, &k, &v, &dout})
      for (double& y : *x) y = g(rng);
    const double scale = 0.6;
    const ReferenceAttention r = reference_attention(q.data(), k.data(), v.data(), dout.data(), N, d, scale, causal);
    auto loss = [&] {
      const ReferenceAttention f = reference_attention(q.data(), k.data(), v.data(), dout.data(), N, d, scale, causal);
      double s = 0;
      for (std::size_t x = 0; x < f.o.size(); ++x) s += dout[x] * f.o[x];
      return s;
    };
    // Central differences: truncation O(h^2) ~ 1e-10 and cancellation ~ 1e-16/h ~ 1e-11 with
    // h = 1e-5, so 1e-7 absolute + relative is a bound with margin, not a fitted epsilon.
    const double h = 1e-5;
    for (auto [x, grad] : {std::pair{&q, &r.dq}, std::pair{&k, &r.dk}, std::pair{&v, &r.dv}})
      for (std::size_t e = 0; e < x->size(); ++e) {
        const double keep = (*x)[e];
        (*x)[e] = keep + h;
        const double up = loss();
        (*x)[e] = keep - h;
        const double down = loss();
        (*x)[e] = keep;
        const double fd = (up - down) / (2 * h);
        INFO("causal " << causal << " element " << e);
        REQUIRE(std::fabs(fd - (*grad)[e]) <= 1e-7 * (1 + std::fabs(fd)));
      }
    // O rows are convex combinations of V rows; lse >= the row max score.
    for (std::int64_t i = 0; i < N; ++i) CHECK(std::isfinite(r.lse[i]));
  }
}
