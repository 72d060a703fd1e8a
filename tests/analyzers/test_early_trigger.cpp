// C1 at the very start of a run ("events in the first steps of a run are found"): a
// repeated-max rate that steps up within the first 1% of the records, where the smoothing window
// reaches across the step, is found with its onset; an early bump that falls back is not a
// trigger. Binomial counts with a fresh seed, printed.
#include <cstdio>
#include <random>

#include "catch_compat.hpp"
#include "lpdiag/analyzers/chain.hpp"
#include "lpdiag/trace/trace_writer.hpp"
#include "temp_dir.hpp"
#include "test_seed.hpp"

using namespace lpdiag;

namespace {
// Two heads; head 1's rate is `rate(record)`, head 0's stays at 0.003. Steps 100, 103, 106, ...
template <class Rate>
analysis::LinkResult trigger_of(const std::string& name, unsigned seed, int rows, Rate rate) {
  std::mt19937 rng(seed);
  const std::string path = lpdiag_test::temp_path("early", name);
  TraceLayout L;
  L.scalars = {"loss", "lr", "grad_norm"};
  L.attention.push_back({"a0", 0, 2, 64, "fa2", R"({"kind":"none"})"});
  {
    TraceWriter w(path, L);
    for (int r = 0; r < 1500; ++r) {
      TraceRecord rec = TraceRecord::unmeasured(L, 100 + 3 * r);
      rec.scalars = {2.0 + 1.0 / (1 + r / 100.0), 1e-3, 1.0};
      for (int h = 0; h < 2; ++h) {
        auto& c = rec.attention[0][static_cast<std::size_t>(h)];
        c = HeadCounters{};
        c.rows = rows;
        c.repeated_max_rows = std::binomial_distribution<std::int64_t>(rows, h == 1 ? rate(r) : 0.003)(rng);
      }
      w.append(rec);
    }
  }
  return analysis::reconstruct_chain(analysis::bin_traces({path})).links[0];
}
}  // namespace

TEST_CASE("a trigger in the first 1% of the run is found at its onset; an early bump that falls back is not", "[analyzers]") {
  const unsigned seed = lpdiag_test::seed("test_early_trigger#19", 1150464u);
  std::printf("seed %u\n", seed);
  // 0.003 -> 0.04 at record 8 (step 124), as gen2 seed 31058. With 480
  // rows per record the step is ~7.5 noise s.d. of a bin, near the rule's 6: under an earlier rule
  // the smoothed bins before the step, which carry part of it, hid it in most such traces (6 of
  // 20 found, measured with an earlier rule); now 19-20 of 20 over three fresh seeds.
  // 20 traces, at least 14 found at the right head and onset. Measured 17-20 of 20
  // over 12 fresh runs (mean 18.8: a miss rate near 6%) and saw 15 once in a full ctest, so the
  // old floor of 16 failed ~3% of runs; at 14 a chance failure needs 7 misses (~0.1%), and the
  // earlier rule (6 of 20) still fails it.
  int found = 0;
  for (unsigned i = 0; i < 20; ++i) {
    const auto step = trigger_of("step.h5", seed + 2 + i, 480, [](int r) { return r < 8 ? 0.003 : 0.04; });
    // Onset tolerance: a bin is ~9 steps (4,500 steps over 512 bins), and 5% of the run (225
    // steps) is the validation's bound; 45 steps is five bins.
    found += step.present && step.head == 1 && std::abs(step.onset_step - 124) <= 45;
  }
  std::printf("early steps found: %d of 20\n", found);
  CHECK(found >= 14);
  // The same rise within the first 1%, gone again by 15% of the run: a transient, as the early
  // repeated maxima of a real GPT-2 run (layer 1 head 10 of the GPT-2 seed-mma/none run at lr 1e-3, docs/results/reproduction.md).
  const auto bump = trigger_of("bump.h5", seed + 1, 1024, [](int r) { return r < 8 ? 0.003 : r < 200 ? 0.04 : 0.004; });
  CHECK_FALSE(bump.present);
}
