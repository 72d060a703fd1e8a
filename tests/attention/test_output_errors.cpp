// output_errors and correctly_rounded_output: any output judged against a run's kept fp64
// reference. The correctly rounded output is judged as it should be (its errors are exactly
// O_hp's rounding errors), an output pushed up by one bf16 place in every element is reported
// as biased, and a non-finite element is counted.
#include <cmath>
#include <cstdio>
#include <random>

#include "../catch_compat.hpp"
#include "lpdiag/attention/engine.hpp"
#include "lpdiag/attention/probe_families.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/numerics/convert.hpp"
#include "lpdiag/stats/bias_tests.hpp"
#include "test_seed.hpp"

using namespace lpdiag;

TEST_CASE("output_errors judges exact, biased and broken outputs", "[attention][output_errors]") {
  const std::uint64_t seed = lpdiag_test::seed("test_output_errors#8", 1063355u);
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const ProbeCase pc = make_probe_case("iid", false, seed);
  const AttentionInputs in{pc.q.data(), pc.k.data(), pc.v.data(), pc.dout.data(), pc.B, pc.H, pc.N, pc.d};
  AttentionConfig cfg;
  AttentionOptions opt;
  opt.backward = false;
  opt.keep_reference = true;
  const AttentionRun run = run_attention(cfg, in, opt);
  REQUIRE(run.o_hp.size() == run.o.size());
  REQUIRE(run.delta_hp.size() == run.lse.size());

  // The run's own output through output_errors gives the run's own O errors.
  const OutputErrors self = output_errors(run, run.o.data(), pc.dout.data());
  CHECK(self.o_err.count() == run.o_err.count());
  CHECK(self.o_err.sum() == Catch::Approx(run.o_err.sum()).epsilon(1e-12));

  const std::vector<float> exact = correctly_rounded_output(run);
  const FloatFormat& bf = format(FormatId::bf16);
  for (std::size_t x = 0; x < exact.size(); x += 97) CHECK(std::fabs(exact[x] - run.o_hp[x]) <= 0.5 * ulp(run.o_hp[x], bf));
  const OutputErrors ex = output_errors(run, exact.data(), pc.dout.data());
  // Exact rounding of i.i.d. data is unbiased: |z| < 5 (a 5-sigma bound; the seed is fixed and printed).
  CHECK(std::fabs(mean_z(ex.o_err.count(), ex.o_err.sum(), ex.o_err.sumsq())) < 5);

  std::vector<float> up = exact;
  for (float& v : up) v = static_cast<float>(v + ulp(v, bf));
  const OutputErrors b = output_errors(run, up.data(), pc.dout.data());
  CHECK(mean_z(b.o_err.count(), b.o_err.sum(), b.o_err.sumsq()) > 100);

  up[3] = std::nanf("");
  CHECK(output_errors(run, up.data(), pc.dout.data()).nan_count == 1);

  AttentionOptions no_ref;
  no_ref.backward = false;
  const AttentionRun plain = run_attention(cfg, in, no_ref);
  CHECK_THROWS_AS(output_errors(plain, plain.o.data(), pc.dout.data()), InvalidArgument);
}
