// The run verdict on losses that go non-finite: a NaN loss with its nan_inf
// events, and an all-Inf loss, are failures of kind non_finite with the onset of the first one;
// never "clean" and never "no loss values". Seeds are printed.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "catch_compat.hpp"
#include "lpdiag/analyzers/chain.hpp"
#include "lpdiag/trace/trace_writer.hpp"
#include "temp_dir.hpp"
#include "test_seed.hpp"

using namespace lpdiag;

namespace {
// `loss(step)` for steps 10, 12, ..., a nan_inf event wherever the loss is not finite.
// `events` are added as they are (the Monitor's live alarms).
template <class Loss>
std::string write_losses(const std::string& name, int records, Loss loss, const std::vector<TraceEvent>& events = {}) {
  const std::string path = lpdiag_test::temp_path("verdict", name);
  TraceLayout L;
  L.scalars = {"loss", "lr", "grad_norm"};
  TraceWriter w(path, L);
  for (const auto& e : events) w.add_event(e);
  for (int r = 0; r < records; ++r) {
    const std::int64_t step = 10 + 2 * r;
    TraceRecord rec = TraceRecord::unmeasured(L, step);
    rec.scalars = {loss(step), 1e-3, 1.0};
    if (!std::isfinite(rec.scalars[0])) w.add_event({step, "nan_inf", -1, -1, rec.scalars[0], "loss is not finite"});
    w.append(rec);
  }
  w.close();
  return path;
}
}  // namespace

TEST_CASE("a loss that turns NaN is a non_finite failure from its first NaN step", "[analyzers][verdict]") {
  const unsigned seed = lpdiag_test::seed("test_run_verdict#22", 1174221u);
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.02);
  const int nan_from = 100 + static_cast<int>(rng() % 200);
  const auto path = write_losses("nan.h5", 400, [&](std::int64_t step) {
    return (step - 10) / 2 >= nan_from ? std::nan("") : 3.0 + std::exp(-double(step) / 200) + noise(rng);
  });
  const auto c = analysis::reconstruct_chain(analysis::bin_traces({path}));
  REQUIRE_FALSE(c.run.healthy);
  CHECK(c.run.failure.kind == "non_finite");
  CHECK(c.run.failure.onset_step == 10 + 2 * nan_from);
  CHECK(c.links[4].present);
}

TEST_CASE("an all-Inf loss is a non_finite failure, not a trace without losses", "[analyzers][verdict]") {
  const auto path = write_losses("inf.h5", 50, [](std::int64_t) { return INFINITY; });
  const auto c = analysis::reconstruct_chain(analysis::bin_traces({path}));
  REQUIRE_FALSE(c.run.healthy);
  CHECK(c.run.failure.kind == "non_finite");
  CHECK(c.run.failure.onset_step == 10);
  CHECK(c.links[4].evidence.find("no loss values") == std::string::npos);
}

TEST_CASE("a decaying noisy loss is healthy", "[analyzers][verdict]") {
  const unsigned seed = lpdiag_test::seed("test_run_verdict#23", 1182140u);
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::student_t_distribution<double> t3(3.0);
  const auto path = write_losses("ok.h5", 800, [&](std::int64_t step) { return 2.0 + 3.0 * std::exp(-double(step) / 300) + 0.01 * t3(rng); });
  const auto c = analysis::reconstruct_chain(analysis::bin_traces({path}));
  CHECK(c.run.healthy);
}

TEST_CASE("values that cannot be right are skipped and named in a warning", "[analyzers][verdict]") {
  const std::string path = lpdiag_test::temp_path("verdict", "nonsense.h5");
  TraceLayout L;
  L.scalars = {"loss", "lr", "grad_norm"};
  L.attention.push_back({"a0", 0, 2, 64, "fa2", R"({"kind":"none"})"});
  L.matrices.push_back({"a0.q", "attn_q", 0, 128, 128, 2, "a0.q"});
  {
    TraceWriter w(path, L);
    for (int r = 0; r < 40; ++r) {
      TraceRecord rec = TraceRecord::unmeasured(L, r);
      rec.scalars = {3.0 - 0.01 * r, 1e-3, 1.0};
      for (auto& c : rec.attention[0]) c = HeadCounters{}, c.rows = 100, c.repeated_max_rows = r == 7 ? 500 : 1;
      if (r == 11) rec.attention[0][0].delta_err_count = -5;  // counts below -1 (the unmeasured mark)
      if (r == 12) rec.attention[0][1].delta_err_sumsq = -1.0;  // a negative sum of squares
      rec.weights[0].spectral_norm = r == 9 ? -2.0 : 1.0;
      if (r == 13) rec.updates[0].concentration = 1.7;  // sigma_1^2 / |dW|_F^2 cannot exceed 1
      if (r == 14) rec.updates[0].similarity_prev = -0.3;  // a product of absolute values
      rec.weights[0].head_spectral_norm = {1.0, 1.0};
      w.append(rec);
    }
  }
  const auto t = analysis::bin_traces({path});
  CHECK(t.rates_above_one == 2);  // both heads of record 7
  CHECK(t.negative_norms == 1);
  CHECK(t.other_impossible == 4);
  const auto c = analysis::reconstruct_chain(t);
  bool warned = false;
  for (const auto& f : c.findings) warned |= f.find("WARNING: the trace holds values that cannot be right") == 0;
  CHECK(warned);
}

namespace {
// Max logits that rise 1 -> ~1,500 within the first 5% of the run and stay there (a collapse by
// the attention_logit_growth rule), with the loss `loss(record)`; Student-t noise on both.
template <class Loss>
analysis::ChainResult logit_run(const std::string& name, unsigned seed, Loss loss, double rise_fraction = 0.05) {
  std::mt19937 rng(seed);
  std::student_t_distribution<double> t3(3.0);
  const std::string path = lpdiag_test::temp_path("verdict", name);
  TraceLayout L;
  L.scalars = {"loss", "lr", "grad_norm"};
  L.attention.push_back({"a0", 0, 2, 64, "seed", R"({"kind":"none"})"});
  const int R = 2000;
  {
    TraceWriter w(path, L);
    for (int r = 0; r < R; ++r) {
      TraceRecord rec = TraceRecord::unmeasured(L, r);
      rec.scalars = {loss(r) + 0.01 * t3(rng), 1e-3, 1.0};
      const double grown = 1500.0 * (1.0 + 0.05 * t3(rng)), x = std::min(1.0, r / (rise_fraction * R));
      for (auto& c : rec.attention[0]) c = HeadCounters{}, c.rows = 100, c.logit_max = static_cast<float>(std::exp(x * std::log(grown)));
      w.append(rec);
    }
  }
  return analysis::reconstruct_chain(analysis::bin_traces({path}));
}
}  // namespace

// The 10% rule of run_verdict.cpp: the failing corpus runs' loss fell 2.0-6.8% over their
// second half, the runs that kept learning 12.6-42%. Here ~30% against under 1%.
TEST_CASE("logit growth while the loss keeps learning is a warning; with the loss stalled, a failure", "[analyzers][verdict]") {
  const unsigned seed = lpdiag_test::seed("test_run_verdict#24", 1190059u);
  std::printf("seed %u\n", seed);
  const auto learning = logit_run("logit-learning.h5", seed, [](int r) { return 1.0 + 3.0 * std::exp(-r / 800.0); });
  CHECK(learning.run.healthy);
  REQUIRE(learning.run.warnings.size() == 1);
  CHECK(learning.run.warnings[0].kind == "attention_logit_growth");
  const auto stalled = logit_run("logit-stalled.h5", seed + 1, [](int r) { return 2.4 + 2.0 * std::exp(-r / 40.0); });
  REQUIRE_FALSE(stalled.run.healthy);
  CHECK(stalled.run.failure.kind == "attention_logit_growth");
  // Its loss also sat on a plateau after its early fall: that is said, as a warning.
  REQUIRE(stalled.run.warnings.size() == 1);
  CHECK(stalled.run.warnings[0].kind == "loss_plateau");
}

// The shape of seed-mma/none at lr 1e-3 seed 3 (docs/results/reproduction.md): the logits
// collapse in the first 5% of the run, the loss learns through it (2.4 -> ~0.35, the rule's
// "after the rise" fall ~60%, against 30% needed), then diverges over the last fifth to 3-4x its
// best with no single-bin spike (a ramp over ~300 records). The failure is the late loss
// explosion, from where the loss left its best (the ramp's start, within a tenth of the run);
// the early collapse is a warning. An earlier verdict said attention_logit_growth from
// the first bins, and the chain was rejected for a C5 "before" every link. A loss that stops
// learning at the collapse (the stalled case above) stays an attention_logit_growth failure.
TEST_CASE("a late divergence after learning through an early logit collapse is the failure, the collapse a warning", "[analyzers][verdict]") {
  const unsigned seed = lpdiag_test::seed("test_run_verdict#25", 1197978u);
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  const int ramp_from = 1500 + static_cast<int>(rng() % 200);  // of 2,000 records
  const auto c = logit_run("logit-then-divergence.h5", seed, [&](int r) {
    const double learned = 0.35 + 2.0 * std::exp(-r / 300.0);
    return r < ramp_from ? learned : learned * (1.0 + 3.0 * std::min(1.0, (r - ramp_from) / 300.0));
  });
  REQUIRE_FALSE(c.run.healthy);
  CHECK(c.run.failure.kind == "loss_explosion");
  CHECK(std::abs(c.run.failure.onset_step - ramp_from) <= 200);  // a tenth of the run
  CHECK(c.run.failure.evidence.find("twice its best") != std::string::npos);
  bool logit_warning = false;
  for (const auto& w : c.run.warnings) logit_warning |= w.kind == "attention_logit_growth" && w.evidence.find("learned through it") != std::string::npos;
  CHECK(logit_warning);
  // C5: the failure itself where no bin spikes, else the spike, which lies on the ramp.
  CHECK(c.links[4].present);
  CHECK(c.links[4].onset_step >= ramp_from - 200);
  CHECK(c.links[4].onset_step <= ramp_from + 300);
}

// The plateau rule of run_verdict.cpp: >= 20% fall to the first fifth, < 3% over the rest.
// GPT-2 small at lr 3e-3 in fp32 attention fell 4.7 -> 2.44 in 40 steps and sat there for 1,900
// (docs/results/reproduction.md); these losses are shaped alike with fresh noise of 0.5%
// of the level (a tenth of the 3% margin), and set against a run that keeps learning (~30% over
// its last four fifths) and a converged run's tail (no early fall). Seeds are printed.
TEST_CASE("a loss that falls early and then stops learning is a plateau warning, not a failure", "[analyzers][verdict]") {
  const unsigned seed = lpdiag_test::seed("test_run_verdict#26", 1205897u);
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::student_t_distribution<double> t3(3.0);
  const double noise = 0.005 * 2.44 / std::sqrt(3.0);  // t3 has s.d. sqrt(3)
  const auto stuck = write_losses("plateau.h5", 1000, [&](std::int64_t s) { return 2.44 + 2.3 * std::exp(-double(s) / 15) + noise * t3(rng); });
  const auto a = analysis::reconstruct_chain(analysis::bin_traces({stuck}));
  CHECK(a.run.healthy);
  REQUIRE(a.run.warnings.size() == 1);
  CHECK(a.run.warnings[0].kind == "loss_plateau");
  CHECK(a.run.warnings[0].onset_step < 200);
  const auto learning =
      write_losses("learning.h5", 1000, [&](std::int64_t s) { return 1.0 + 3.7 * std::exp(-double(s) / 600) + noise * t3(rng); });
  CHECK(analysis::reconstruct_chain(analysis::bin_traces({learning})).run.warnings.empty());
  const auto tail = write_losses("tail.h5", 1000, [&](std::int64_t s) { return 0.9 + 0.01 * std::exp(-double(s) / 600) + noise * t3(rng); });
  const auto c = analysis::reconstruct_chain(analysis::bin_traces({tail}));
  CHECK(c.run.healthy);
  CHECK(c.run.warnings.empty());
}

// Logits that rise 1 -> ~1,500 evenly over 80% of the run (~2.5x per tenth, below the collapse
// rule's 30x) are still said: a warning, as the paper-fix arm (7,424) needed.
TEST_CASE("logits past 1,000 that rose slowly are a warning", "[analyzers][verdict]") {
  const unsigned seed = lpdiag_test::seed("test_run_verdict#27", 1213816u);
  std::printf("seed %u\n", seed);
  const auto slow = logit_run("logit-slow.h5", seed, [](int r) { return 1.0 + 3.0 * std::exp(-r / 800.0); }, 0.8);
  CHECK(slow.run.healthy);
  REQUIRE(slow.run.warnings.size() == 1);
  CHECK(slow.run.warnings[0].kind == "attention_logit_growth");
  CHECK(slow.run.warnings[0].evidence.find("more slowly than a collapse") != std::string::npos);
  // Located too: the first head past 1,000 (both heads of the layer rise alike) and the count.
  CHECK(slow.run.warnings[0].layer_index == 0);
  CHECK((slow.run.warnings[0].head == 0 || slow.run.warnings[0].head == 1));
  CHECK(slow.run.warnings[0].evidence.find("2 of 2 heads reached 1,000") != std::string::npos);
}

// Where a logit collapse starts: 2 layers of 3 heads, one (layer, head) drawn from the seed
// rises 1 -> ~1,500 within the first 5% of the run, the others stay at ~3 or (a second draw)
// follow from 30% of the run on; the loss stalls. The verdict names the early head, and counts
// the heads that reached 1,000.
TEST_CASE("a logit collapse names the head whose logits ran away first", "[analyzers][verdict]") {
  const unsigned seed = lpdiag_test::seed("test_run_verdict#28", 1221735u);
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::student_t_distribution<double> t3(3.0);
  const int lead_layer = static_cast<int>(rng() % 2), lead_head = static_cast<int>(rng() % 3);
  for (const bool others_follow : {false, true}) {
    const std::string path = lpdiag_test::temp_path("verdict", others_follow ? "lead-follow.h5" : "lead-alone.h5");
    TraceLayout L;
    L.scalars = {"loss", "lr", "grad_norm"};
    L.attention.push_back({"a0", 0, 3, 64, "seed", R"({"kind":"none"})"});
    L.attention.push_back({"a1", 1, 3, 64, "seed", R"({"kind":"none"})"});
    const int R = 2000;
    {
      TraceWriter w(path, L);
      for (int r = 0; r < R; ++r) {
        TraceRecord rec = TraceRecord::unmeasured(L, r);
        rec.scalars = {2.4 + 2.0 * std::exp(-r / 40.0) + 0.01 * t3(rng), 1e-3, 1.0};
        for (int l = 0; l < 2; ++l)
          for (int h = 0; h < 3; ++h) {
            const bool lead = l == lead_layer && h == lead_head;
            const double start = lead ? 0.0 : 0.3, x = std::clamp((r / double(R) - start) / 0.05, 0.0, 1.0);
            const double grown = 1500.0 * (1.0 + 0.05 * t3(rng)), level = lead || others_follow ? std::exp(x * std::log(grown)) : 3.0;
            auto& c = rec.attention[static_cast<std::size_t>(l)][static_cast<std::size_t>(h)];
            c = HeadCounters{}, c.rows = 100, c.logit_max = static_cast<float>(level * (1.0 + 0.02 * std::fabs(t3(rng))));
          }
        w.append(rec);
      }
    }
    const auto c = analysis::reconstruct_chain(analysis::bin_traces({path}));
    REQUIRE_FALSE(c.run.healthy);
    CHECK(c.run.failure.kind == "attention_logit_growth");
    CHECK(c.run.failure.layer_index == lead_layer);
    CHECK(c.run.failure.head == lead_head);
    CHECK(c.run.failure.evidence.find(fmt::format("in layer {} head {}", lead_layer, lead_head)) != std::string::npos);
    CHECK(c.run.failure.evidence.find(others_follow ? "6 of 6 heads reached 1,000" : "1 of 6 heads reached 1,000") != std::string::npos);
  }
}

// A loss that turns up in the last twentieth of the run while it still ends below its best before
// the last fifth, so that the stall rule cannot see it, as GPT-2 seed-mma/none at lr 1e-3 seed
// 17's did (0.147 -> 0.20 over its last 250 steps, its best before the last fifth 0.24). Here a
// loss falling linearly 0.37 -> 0.12 with Gaussian noise of s.d. 0.01 rises by 0.07 (~50% above
// the lowest running median of the last fifth before it, ~0.135) over records 920..960 of 1,000
// and stays there: ~20 standard errors of the two medians, and no single jump for the spike rule;
// the 10% rise (0.013) is under the rule's 25%.
TEST_CASE("a loss that rises in the run's last steps is a warning, not silence", "[analyzers][verdict]") {
  const unsigned seed = lpdiag_test::seed("test_run_verdict#30", 1290417u);
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.01);
  auto run = [&](const char* name, double rise) {
    return write_losses(name, 1000, [&, rise](std::int64_t s) {
      const double up = std::clamp((double(s) - (10 + 2 * 920)) / 80.0, 0.0, 1.0);  // over records 920..960, then held
      return 0.12 + 0.25 * (1.0 - double(s) / 2010) + rise * up + noise(rng);
    });
  };
  const auto c = analysis::reconstruct_chain(analysis::bin_traces({run("rise.h5", 0.07)}));
  INFO("verdict: " << (c.run.healthy ? std::string("healthy") : c.run.failure.kind + ": " + c.run.failure.evidence));
  CHECK(c.run.healthy);
  REQUIRE_FALSE(c.run.warnings.empty());
  CHECK(c.run.warnings.front().kind == "loss_rise_at_end");
  CHECK(c.run.warnings.front().onset_step >= 10 + 2 * 920);
  for (double rise : {0.0, 0.013}) {
    const auto q = analysis::reconstruct_chain(analysis::bin_traces({run("flat.h5", rise)}));
    INFO("rise " << rise);
    CHECK(q.run.healthy);
    CHECK(q.run.warnings.empty());
  }
}

TEST_CASE("a live loss_explosion alarm in the trace is a failure where the records miss the spike", "[analyzers][verdict]") {
  // The records keep one step in 2 of a loss that decays smoothly: a spike between two records
  // (as in a trace that keeps one record in 20) is not in them, but the Monitor read every step.
  const unsigned seed = lpdiag_test::seed("test_run_verdict#live", 1307711u);
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.005);
  auto loss = [&](std::int64_t s) { return 0.1 + 2.0 * std::exp(-double(s) / 300) + noise(rng); };
  const TraceEvent live{1501, "alarm", -1, -1, NAN, "loss_explosion: the loss's running median reached 0.21 at step 1501, 2.1x its best (0.1)"};
  const TraceEvent growth{1401, "alarm", 2, 9, NAN, "growth: layer 2 head 9: sigma_1 of its W_Q slice grew 1.7x"};

  const auto c = analysis::reconstruct_chain(analysis::bin_traces({write_losses("live.h5", 1000, loss, {growth, live})}));
  REQUIRE_FALSE(c.run.healthy);
  CHECK(c.run.failure.kind == "loss_explosion");
  CHECK(c.run.failure.onset_step == 1501);
  CHECK(c.run.failure.evidence.find("live alarm") != std::string::npos);
  CHECK(c.run.failure.evidence.find("2.1x its best") != std::string::npos);
  CHECK(c.links[4].present);

  // Another kind of alarm alone is no failure: the growth alarm is a warning of risk.
  const auto g = analysis::reconstruct_chain(analysis::bin_traces({write_losses("growth.h5", 1000, loss, {growth})}));
  CHECK(g.run.healthy);

  // Where the records show the explosion themselves, their onset stands and the alarm adds no sign.
  auto exploding = [&](std::int64_t s) { return loss(s) + (s >= 1400 ? 1.5 : 0.0); };
  const auto e = analysis::reconstruct_chain(analysis::bin_traces({write_losses("shown.h5", 1000, exploding, {live})}));
  REQUIRE_FALSE(e.run.healthy);
  CHECK(e.run.failure.kind == "loss_explosion");
  CHECK(e.run.failure.onset_step < 1501);
  CHECK(e.run.failure.evidence.find("live alarm") == std::string::npos);
}
