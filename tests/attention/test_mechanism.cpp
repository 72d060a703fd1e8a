// The tests that pin the mechanism of docs/design.md section 1 on the CPU emulation.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "attention_inputs.hpp"
#include "catch_compat.hpp"
#include "lpdiag/attention/engine.hpp"
#include "lpdiag/attention/reference.hpp"
#include "lpdiag/stats/bias_tests.hpp"
#include "test_seed.hpp"

using namespace lpdiag;
using namespace lpdiag::testing;

namespace {
AttentionConfig config(Policy p, const std::string& fix = "none", int tile_k = 64) {
  AttentionConfig c;
  c.policy = p;
  c.fix = parse_fix(fix);
  c.tile_k = tile_k;
  return c;
}
double column_z(const AttentionRun& r, std::size_t c) {
  return mean_z(r.o_err_by_column[c].count(), r.o_err_by_column[c].sum(), r.o_err_by_column[c].sumsq());
}
}  // namespace

TEST_CASE("(a) the worked example: two bf16 values and a residual round away from zero", "[attention][mechanism]") {
  // The same sum, built the way the P-bar V accumulation builds it: P-bar = 1 for two entries.
  const float sum = -2.40625f + -2.296875f;  // exact in fp32: the tie -4.703125
  CHECK(round_bf16(sum) == -4.6875f);
  CHECK(round_bf16(sum + -0.000865459442139f) == -4.71875f);
}

TEST_CASE("(b) seed policy: repeated maxima + one-signed V give a one-signed O error", "[attention][mechanism]") {
  const Tensors t = repeated_max(4, 256, 16, 8.0f, 20261130);
  const AttentionRun r = run_attention(config(Policy::seed), t.inputs());
  CHECK(r.heads[0].repeated_max_rows == 256);
  for (std::size_t c = 0; c < 16; ++c) {
    const double z = column_z(r, c);
    INFO("column " << c << " z " << z);
    // V column c is positive for even c, negative for odd c; rounding goes away from zero.
    if (c % 2 == 0) CHECK(z >= 6.0);
    else CHECK(z <= -6.0);
  }
}

TEST_CASE("(c) i.i.d. Gaussian inputs show no bias in any policy", "[attention][mechanism]") {
  for (Policy p : {Policy::fa2, Policy::seed, Policy::fp32}) {
    for (bool causal : {false, true}) {
      const Tensors t = gaussian(2, 3, 200, 32, 77 + static_cast<int>(p));
      AttentionConfig c = config(p);
      c.causal = causal;
      const AttentionRun r = run_attention(c, t.inputs());
      const double oz = mean_z(r.o_err.count(), r.o_err.sum(), r.o_err.sumsq());
      const double dz = mean_z(r.delta_err.count(), r.delta_err.sum(), r.delta_err.sumsq());
      INFO(policy_name(p) << " causal " << causal << " O z " << oz << " delta z " << dz);
      CHECK(std::fabs(oz) < 4.0);
      CHECK(std::fabs(dz) < 4.0);
      // fp32 scores of Gaussian data never tie; seed rounds S to bf16, where ties are common.
      if (p != Policy::seed) CHECK(r.heads[0].repeated_max_rows == 0);
    }
  }
}

TEST_CASE("(d) fp32 policy shows no bias on the adversarial input", "[attention][mechanism]") {
  const Tensors t = repeated_max(4, 256, 16, 8.0f, 20261130);
  const AttentionRun r = run_attention(config(Policy::fp32), t.inputs());
  for (std::size_t c = 0; c < 16; ++c) {
    INFO("column " << c << " z " << column_z(r, c));
    CHECK(std::fabs(column_z(r, c)) < 4.0);
  }
  // Its error is fp32 rounding: fp32's ulp at |O| < 4 is <= 2^-21 (4.8e-7); exp, the rescaling,
  // the accumulation and the division each add at most a few ulps, so the RMS stays < 8 ulps.
  CHECK(std::sqrt(r.o_err.sumsq() / r.o_err.count()) < 8 * 0x1p-21);
}

TEST_CASE("(e) a large repeated max: the paper fix with a large beta underflows (NaN, or zeros under the paper's floor), safe does not",
          "[attention][mechanism][fix]") {
  const Tensors t = repeated_max(1, 64, 16, 120.0f, 5);  // max score 120 in every row
  for (Policy p : {Policy::fa2, Policy::seed, Policy::seed_mma}) {
    const AttentionRun paper = run_attention(config(p, "paper:beta=8"), t.inputs());
    const AttentionRun safe = run_attention(config(p, "safe"), t.inputs());
    INFO(policy_name(p) << ": paper NaN " << paper.nan_count << ", safe NaN " << safe.nan_count);
    CHECK(paper.heads[0].fix_engaged_rows == 64);
    if (p == Policy::fa2) {
      CHECK(paper.nan_count > 0);  // exp(120 - 960) underflows: the row sum is 0
    } else {
      // seed and seed-mma follow the paper's code, whose 1e-10 floor on the tile row sum hides the
      // underflow: no NaN, but O = 0 / 1e-10 = 0 in every element.
      CHECK(paper.nan_count == 0);
      float largest = 0.0f;
      for (float x : paper.o) largest = std::max(largest, std::fabs(x));
      CHECK(largest == 0.0f);
    }
    CHECK(safe.heads[0].fix_engaged_rows == 64);
    CHECK(safe.nan_count == 0);
    CHECK(safe.heads[0].pbar_one_entries == 0);
  }
}

TEST_CASE("(e2) the fix removes P-bar == 1 entries and the seed bias on the adversarial input", "[attention][fix]") {
  const Tensors t = repeated_max(4, 256, 16, 8.0f, 20261130);
  const AttentionRun none = run_attention(config(Policy::seed), t.inputs());
  const AttentionRun paper = run_attention(config(Policy::seed, "paper"), t.inputs());
  CHECK(none.heads[0].pbar_one_entries >= 2 * 256);
  CHECK(paper.heads[0].fix_engaged_rows == 256);
  CHECK(paper.heads[0].pbar_one_entries == 0);
  CHECK(paper.nan_count == 0);
  // max == 0 with repeats: the paper rule leaves it, safe handles it.
  Tensors z = repeated_max(1, 64, 16, 8.0f, 9);
  for (float& x : z.q) x = 0.0f;  // every score is exactly 0
  const AttentionRun zp = run_attention(config(Policy::fa2, "paper"), z.inputs());
  const AttentionRun zs = run_attention(config(Policy::fa2, "safe"), z.inputs());
  CHECK(zp.heads[0].zero_max_repeated_rows == 64);
  CHECK(zp.heads[0].fix_engaged_rows == 0);
  CHECK(zs.heads[0].fix_engaged_rows == 64);
  CHECK(zs.heads[0].pbar_one_entries == 0);
}

TEST_CASE("(f) fa2 on the adversarial and Gaussian inputs: measured and reported", "[attention][mechanism][report]") {
  const Tensors adv = repeated_max(4, 256, 16, 8.0f, 20261130);
  const Tensors iid = gaussian(1, 4, 256, 16, 20261130);
  for (const auto* t : {&adv, &iid}) {
    for (Policy p : {Policy::fa2, Policy::seed, Policy::fp32, Policy::fp8_p}) {
      const AttentionRun r = run_attention(config(p), t->inputs());
      const BiasResult ob = bias_test(r.o_err), db = bias_test(r.delta_err);
      double worst = 0;
      for (std::size_t c = 0; c < 16; ++c) worst = std::max(worst, std::fabs(column_z(r, c)));
      std::printf("[f] %-11s %-5s O err mean %+.3e z %+8.2f (worst column |z| %7.2f)  delta err mean %+.3e z %+8.2f\n",
                  t == &adv ? "adversarial" : "gaussian", policy_name(p), ob.mean, ob.z, worst, db.mean, db.z);
      CHECK(r.nan_count == 0);
    }
  }
}

TEST_CASE("(g) counters are exact: k maxima placed across tile boundaries", "[attention][counters]") {
  const std::int64_t N = 40, d = 4;
  for (int k : {1, 2, 3, 5}) {
    for (int tile : {1, 3, 7, 16, 64}) {
      Tensors t = gaussian(1, 1, N, d, 11);
      // Row i's scores: q_i . k_j = 1 for j in the chosen set, else <= 0.5 (exactly).
      for (std::int64_t i = 0; i < N; ++i)
        for (std::int64_t c = 0; c < d; ++c) t.q[i * d + c] = c == 0 ? 1.0f : 0.0f;
      for (std::int64_t j = 0; j < N; ++j)
        for (std::int64_t c = 0; c < d; ++c) t.k[j * d + c] = c == 0 ? 0.5f : 0.25f;
      // The maxima sit at keys 1, 7, 14, 22, 39: across boundaries for tiles 3, 7, 16.
      const int where[] = {1, 7, 14, 22, 39};
      for (int m = 0; m < k; ++m) t.k[where[m] * d] = 1.0f;
      AttentionConfig c = config(Policy::fa2, "none", tile);
      c.scale = 1.0;
      const AttentionRun r = run_attention(c, t.inputs());
      const HeadCounters& h = r.heads[0];
      INFO("k " << k << " tile " << tile);
      CHECK(h.rows == N);
      CHECK(h.repeated_max_rows == (k >= 2 ? N : 0));
      std::int64_t tiles_with_2 = 0;  // tiles holding >= 2 of the maxima
      for (int j0 = 0; j0 < N; j0 += tile) {
        int in = 0;
        for (int m = 0; m < k; ++m) in += where[m] >= j0 && where[m] < j0 + tile;
        tiles_with_2 += in >= 2;
      }
      // Tiles without a maximum have all scores 0.5: repeated too, when the tile has >= 2 keys.
      std::int64_t plain_tiles_repeated = 0;
      for (int j0 = 0; j0 < N; j0 += tile) {
        int in = 0;
        for (int m = 0; m < k; ++m) in += where[m] >= j0 && where[m] < j0 + tile;
        const int size = std::min<int>(tile, N - j0);
        plain_tiles_repeated += in == 0 && size >= 2;
      }
      CHECK(h.tile_repeated_max_rows == N * (tiles_with_2 + plain_tiles_repeated));
      CHECK(h.zero_max_repeated_rows == 0);
      CHECK(h.logit_max == 1.0f);
      // P-bar == 1 exactly: each maximum once it is the running max; plain 0.5-tiles seen
      // before the first maximum also have P-bar = exp(0) = 1 for all their keys.
      CHECK(h.pbar_one_entries >= N * k);
    }
  }
}

TEST_CASE("the hp path and the fp32 policy agree with the fp64 reference", "[attention][reference]") {
  const Tensors t = gaussian(1, 2, 97, 24, lpdiag_test::seed("test_mechanism#11", 1087112u));
  for (bool causal : {false, true}) {
    AttentionConfig c = config(Policy::fp32, "none", 16);
    c.causal = causal;
    const AttentionRun r = run_attention(c, t.inputs());
    for (std::int64_t h = 0; h < 2; ++h) {
      const std::size_t off = static_cast<std::size_t>(h * 97 * 24);
      std::vector<double> q(t.q.begin() + off, t.q.begin() + off + 97 * 24), k(t.k.begin() + off, t.k.begin() + off + 97 * 24),
          v(t.v.begin() + off, t.v.begin() + off + 97 * 24), g(t.dout.begin() + off, t.dout.begin() + off + 97 * 24);
      const ReferenceAttention ref = reference_attention(q.data(), k.data(), v.data(), g.data(), 97, 24, 1 / std::sqrt(24.0), causal);
      // fp32 arithmetic over sums of <= 97 * 24 terms of magnitude <~ 10: 1e-4 absolute is
      // ~100x the expected rounding error and far below any algorithmic mistake (O(0.1)).
      for (std::size_t x = 0; x < ref.o.size(); ++x) {
        REQUIRE(std::fabs(r.o[off + x] - ref.o[x]) < 1e-4);
        REQUIRE(std::fabs(r.dq[off + x] - ref.dq[x]) < 1e-4);
        REQUIRE(std::fabs(r.dk[off + x] - ref.dk[x]) < 1e-4);
        REQUIRE(std::fabs(r.dv[off + x] - ref.dv[x]) < 1e-4);
      }
    }
    // The fp32 policy's O error against hp (fp64) is fp32 rounding only.
    CHECK(std::sqrt(r.o_err.sumsq() / r.o_err.count()) < 1e-6);
  }
}
