// C2 on sparse `full` records: a weak bias that lasts the whole run is found on the long windows
// (no short window holds more than one record), and zero-mean heavy-tailed errors are not, in
// many heads at once. The shape is GPT-2 small's at --full-every 50 over 2,000 steps: 12 layers x
// 12 heads, 512 bins, one record every 12.8 bins, 16,384 rows per record.
#include <cmath>
#include <cstdio>
#include <random>

#include "catch_compat.hpp"
#include "lpdiag/analyzers/binned_trace.hpp"
#include "lpdiag/analyzers/links.hpp"
#include "test_seed.hpp"

using namespace lpdiag::analysis;

namespace {
constexpr int kLayers = 12, kHeads = 12, kBins = 512, kRecords = 40;
constexpr double kRows = 16384, kSigma = 1e-6;

// Each record's delta-error sums per head: the per-row mean is `bias` * sigma in head
// (bias_layer, bias_head) and 0 elsewhere; the record's noise on the sum is Student-t(3), scaled to
// the sum's standard deviation (heavy tails, as real per-record errors have).
BinnedTrace sparse_trace(std::uint64_t seed, double bias, int bias_layer, int bias_head) {
  BinnedTrace t;
  t.bins = kBins, t.heads = kHeads, t.first_step = 0, t.last_step = 1999, t.records = 2000;
  t.bin_width = 2000.0 / kBins;
  for (int l = 0; l < kLayers; ++l) t.layers.push_back(l);
  t.steps.resize(kBins);
  for (int b = 0; b < kBins; ++b) t.steps[b].first_step = t.steps[b].last_step = std::llround(b * t.bin_width);
  t.head_bins.resize(std::size_t(kLayers) * kHeads * kBins);
  t.layer_bins.resize(std::size_t(kLayers) * kBins);
  std::mt19937_64 g(seed);
  std::student_t_distribution<double> noise(3.0);
  const double t3_sd = std::sqrt(3.0);  // Student-t(3) has variance 3
  for (int r = 0; r < kRecords; ++r) {
    const int b = static_cast<int>(r * 50 / t.bin_width);
    for (int l = 0; l < kLayers; ++l)
      for (int h = 0; h < kHeads; ++h) {
        HeadBin& x = t.head_bins[(std::size_t(l) * kHeads + h) * kBins + b];
        const double mu = (l == bias_layer && h == bias_head) ? bias * kSigma : 0.0;
        x.d_count = kRows;
        x.d_sum = kRows * mu + std::sqrt(kRows) * kSigma * noise(g) / t3_sd;
        x.d_sumsq = kRows * (kSigma * kSigma + mu * mu);
      }
  }
  return t;
}
}  // namespace

TEST_CASE("C2: a weak whole-run bias on sparse records is found on the long windows, in its head", "[analyzers][c2]") {
  // A per-row mean of 0.012 sigma: z ~1.5 per record, ~9.7 over the 40 (the paper's fix at lr 2e-3
  // leaned about so: z +7.9 and +12 in its strongest head). No short window can see it.
  const std::uint64_t seed = lpdiag_test::seed("test_bias_long_windows#29", 1229654u);
  std::printf("C2 long windows, bias case: seed %llu\n", static_cast<unsigned long long>(seed));
  const LinkResult c2 = analyze_bias(sparse_trace(seed, 0.012, 7, 3));
  REQUIRE(c2.present);
  CHECK(c2.layer_index == 7);
  CHECK(c2.head == 3);
  CHECK(c2.evidence.find("long-window") != std::string::npos);
  CHECK(c2.effect > 0);
}

TEST_CASE("C2: zero-mean heavy-tailed errors in 144 heads raise a bias no more often than the bound says", "[analyzers][c2]") {
  // Each family of windows is bounded at a family-wise 1% per trace (Bonferroni over heads x bins,
  // normal tails; the clipped Student-t z are lighter-tailed than that once a window holds 8
  // bins). Here no short window holds more than one record, so only the long family can fire:
  // at most 1% of null traces. 200 fresh ones: 2 expected at the bound, <= 9 allowed (P(X >= 10)
  // < 1e-4 at 1%; measured 3 of 600 with generator seeds 777000..777599).
  const std::uint64_t seed = lpdiag_test::seed("test_bias_long_windows#30", 1237573u);
  std::printf("C2 long windows, null case: seeds %llu..+199\n", static_cast<unsigned long long>(seed));
  int found = 0;
  for (int i = 0; i < 200; ++i) found += analyze_bias(sparse_trace(seed + i, 0.0, -1, -1)).present;
  std::printf("C2 long windows, null case: %d of 200 null traces showed a bias\n", found);
  CHECK(found <= 9);
}
