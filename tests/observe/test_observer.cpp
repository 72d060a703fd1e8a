// The observer against lpdiag's own kernel emulation on the same calls: the CPU fa2 policy run
// at "full" counts its repeated maxima inside the kernel and measures O and delta errors against
// its own fp64 reference; the observer, given only q, k, v, O and dO, must find the same. Also:
// grouped-query heads, batch and head subsets, and the calls it refuses.
#include <cmath>
#include <cstdio>

#include "../catch_compat.hpp"
#include "lpdiag/attention/engine.hpp"
#include "lpdiag/attention/probe_families.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/observe/observer.hpp"
#include "lpdiag/stats/bias_tests.hpp"

using namespace lpdiag;

namespace {

double z_of(std::int64_t n, double sum, double sumsq) { return mean_z(n, sum, sumsq); }

ObservedCall call_of(const ProbeCase& pc, const std::vector<float>& o) {
  ObservedCall c;
  c.q = pc.q.data(), c.k = pc.k.data(), c.v = pc.v.data(), c.o = o.data();
  c.B = pc.B, c.Hq = pc.H, c.Hkv = pc.H, c.Nq = pc.N, c.Nk = pc.N, c.d = pc.d;
  c.causal = pc.causal;
  return c;
}

}  // namespace

TEST_CASE("observer matches the fa2 kernel's own counters and errors on every probe family", "[observe]") {
  for (const std::string& family : probe_family_names()) {
    for (bool causal : {false, true}) {
      const ProbeCase pc = make_probe_case(family, causal);
      AttentionConfig cfg;
      cfg.causal = causal;
      AttentionOptions opt;
      opt.backward = true;
      opt.instrument = true;
      const AttentionRun run = run_attention(cfg, {pc.q.data(), pc.k.data(), pc.v.data(), pc.dout.data(), pc.B, pc.H, pc.N, pc.d}, opt);
      const ObservedForward fwd = observe_forward(call_of(pc, run.o));
      const std::vector<HeadCounters> bwd = observe_backward(pc.dout.data(), fwd.o_error, pc.B, pc.H, pc.N, pc.d);
      INFO(family << (causal ? " causal" : ""));
      for (std::int64_t h = 0; h < pc.H; ++h) {
        const HeadCounters& k = run.heads[static_cast<std::size_t>(h)];
        const HeadCounters& o = fwd.heads[static_cast<std::size_t>(h)];
        const HeadCounters& b = bwd[static_cast<std::size_t>(h)];
        INFO("head " << h);
        CHECK(o.rows == k.rows);
        // The kernel sums S on the tensor cores' order, the observer exactly: a tie that only a
        // last-bit coincidence makes can differ. Over these families: at most 1% of the rows.
        CHECK(std::llabs(o.repeated_max_rows - k.repeated_max_rows) <= k.rows / 100);
        // logit_max: both round a score of the same inputs to fp32; they agree to a few ulps.
        CHECK(std::fabs(o.logit_max - k.logit_max) <= 4e-6f * std::fmax(1.0f, std::fabs(k.logit_max)));
        CHECK(o.o_err_count == k.o_err_count);
        CHECK(o.o_err_pos + o.o_err_neg <= o.o_err_count);
        // Both references are fp64 softmaxes of the same scores (one tiled online, one direct):
        // per-element differences near 1e-16, so the sums agree to 1e-9 of their scale.
        const double o_scale = std::sqrt(k.o_err_sumsq * static_cast<double>(k.o_err_count)) + 1e-300;
        CHECK(std::fabs(o.o_err_sum - k.o_err_sum) <= 1e-9 * o_scale);
        CHECK(o.o_err_sumsq == Catch::Approx(k.o_err_sumsq).epsilon(1e-9));
        CHECK(b.delta_err_count == k.delta_err_count);
        // The kernel forms delta in fp32 (a rounding of |delta| * 2^-24 per addition); the
        // observer forms the difference in fp64. Those roundings are far below the delta errors
        // here: the z-scores agree within 2% (+0.05 absolute for z near 0).
        const double zk = z_of(k.delta_err_count, k.delta_err_sum, k.delta_err_sumsq);
        const double zo = z_of(b.delta_err_count, b.delta_err_sum, b.delta_err_sumsq);
        CHECK(std::fabs(zo - zk) <= 0.02 * std::fabs(zk) + 0.05);
      }
    }
  }
}

TEST_CASE("observer maps grouped-query heads and observes only the rows and heads asked for", "[observe]") {
  const ProbeCase pc = make_probe_case("strong-sinks", true);
  REQUIRE(pc.H >= 2);
  // One k/v head shared by every q head equals the same k/v repeated per head.
  ProbeCase shared = pc;
  const std::size_t per = static_cast<std::size_t>(pc.N * pc.d);
  std::vector<float> k1, v1;  // (B, 1, N, d): head 0 of each batch element
  for (std::int64_t b = 0; b < pc.B; ++b) {
    const std::size_t head0 = static_cast<std::size_t>(b * pc.H) * per;
    k1.insert(k1.end(), pc.k.begin() + static_cast<std::ptrdiff_t>(head0), pc.k.begin() + static_cast<std::ptrdiff_t>(head0 + per));
    v1.insert(v1.end(), pc.v.begin() + static_cast<std::ptrdiff_t>(head0), pc.v.begin() + static_cast<std::ptrdiff_t>(head0 + per));
    for (std::int64_t h = 1; h < pc.H; ++h)
      for (std::size_t x = 0; x < per; ++x) {
        shared.k[head0 + static_cast<std::size_t>(h) * per + x] = pc.k[head0 + x];
        shared.v[head0 + static_cast<std::size_t>(h) * per + x] = pc.v[head0 + x];
      }
  }
  AttentionConfig cfg;
  cfg.causal = true;
  AttentionOptions opt;
  opt.backward = false;
  const AttentionRun run = run_attention(cfg, {shared.q.data(), shared.k.data(), shared.v.data(), nullptr, pc.B, pc.H, pc.N, pc.d}, opt);
  const ObservedForward full = observe_forward(call_of(shared, run.o));
  ObservedCall gqa = call_of(pc, run.o);
  gqa.k = k1.data(), gqa.v = v1.data(), gqa.Hkv = 1;
  const ObservedForward grouped = observe_forward(gqa);
  for (std::int64_t h = 0; h < pc.H; ++h) {
    CHECK(grouped.heads[static_cast<std::size_t>(h)].repeated_max_rows == full.heads[static_cast<std::size_t>(h)].repeated_max_rows);
    CHECK(grouped.heads[static_cast<std::size_t>(h)].o_err_sum == full.heads[static_cast<std::size_t>(h)].o_err_sum);
  }

  ObservedCall some = call_of(shared, run.o);
  some.head_mask = 0b10;  // head 1 only
  const ObservedForward sub = observe_forward(some);
  CHECK(sub.heads[0].rows == 0);
  CHECK(sub.heads[0].o_err_count == 0);
  CHECK(sub.heads[1].rows == full.heads[1].rows);
  CHECK(sub.heads[1].o_err_sum == full.heads[1].o_err_sum);
}

TEST_CASE("observer on a batch: the batch subset is the leading elements", "[observe]") {
  const ProbeCase pc = make_probe_case("iid", false);
  ProbeCase two = pc;  // the same call twice, as a batch of 2
  for (auto* x : {&two.q, &two.k, &two.v, &two.dout}) x->insert(x->end(), x->begin(), x->end());
  two.B = 2 * pc.B;
  AttentionConfig cfg;
  AttentionOptions opt;
  opt.backward = false;
  const AttentionRun run = run_attention(cfg, {two.q.data(), two.k.data(), two.v.data(), nullptr, two.B, two.H, two.N, two.d}, opt);
  const ObservedForward all = observe_forward(call_of(two, run.o));
  ObservedCall first = call_of(two, run.o);
  first.batches = pc.B;
  const ObservedForward half = observe_forward(first);
  CHECK(all.heads[0].rows == 2 * half.heads[0].rows);
  CHECK(all.heads[0].o_err_sum == Catch::Approx(2 * half.heads[0].o_err_sum).epsilon(1e-12));
  CHECK(half.o_error.size() == all.o_error.size() / 2);
  const auto d = observe_backward(two.dout.data(), half.o_error, pc.B, two.H, two.N, two.d);
  CHECK(d[0].delta_err_count == pc.B * pc.N);
}

TEST_CASE("observer refuses what it cannot take, saying what", "[observe]") {
  const ProbeCase pc = make_probe_case("iid", true);
  std::vector<float> o(pc.q.size(), 0.0f);
  ObservedCall c = call_of(pc, o);
  c.Nk = pc.N / 2;
  CHECK_THROWS_AS(check_observed_call(c), InvalidArgument);  // causal with Nq != Nk
  c = call_of(pc, o);
  c.Hkv = 3;
  CHECK_THROWS_AS(check_observed_call(c), InvalidArgument);  // heads not a multiple
  c = call_of(pc, o);
  c.o = nullptr;
  CHECK_THROWS_AS(check_observed_call(c), InvalidArgument);
  c = call_of(pc, o);
  c.scale = std::nan("");
  CHECK_THROWS_AS(check_observed_call(c), InvalidArgument);
  std::vector<float> wrong(3);
  CHECK_THROWS_AS(observe_backward(pc.dout.data(), wrong, pc.B, pc.H, pc.N, pc.d), InvalidArgument);
}
