// The online alarm's detector on records built here: each kind raised by what it names and not by
// what it excludes, each kind once per layer, and never by looking ahead (a prefix raises the same alarms).
#include "../catch_compat.hpp"
#include <cmath>
#include <string>

#include "lpdiag/alarm/alarm_detector.hpp"

using namespace lpdiag::alarm;

namespace {

// 2 layers x 4 heads; every head's sigma grows like a settled run (0.5% per 500 steps), repeated
// maxima at 2% of rows, logits at 20, the loss falling slowly. `grow` (layer 1 head 2) has its sigma
// grow by `rate` per 500 steps from step 1000 on, and its repeated maxima rise to `trig` there.
std::vector<AlarmRecord> run(double rate, double trig, int steps = 3000, int every = 10) {
  std::vector<AlarmRecord> out;
  for (int s = 0; s <= steps; s += every) {
    AlarmRecord r;
    r.step = s;
    r.layers = {0, 1};
    r.heads = 4;
    r.samples.resize(8);
    r.loss = 3.0 - 0.0002 * s;
    for (std::size_t l = 0; l < 2; ++l)
      for (std::int64_t h = 0; h < 4; ++h) {
        auto& x = r.at(l, h);
        const bool g = l == 1 && h == 2 && s > 1000;
        x.sigma = std::exp(0.01 * s / 1000.0 + (g ? rate * (s - 1000) / 500.0 : 0.0));
        x.rows = 1000;
        x.repeated = g ? 1000 * trig : 20;
        x.logit_max = 20;
      }
    out.push_back(r);
  }
  return out;
}

std::vector<Alarm> feed(const std::vector<AlarmRecord>& rs, std::size_t n = SIZE_MAX) {
  AlarmDetector d;
  for (std::size_t i = 0; i < rs.size() && i < n; ++i) d.feed(rs[i]);
  return d.alarms();
}

// run(0.5, ...) with every head's repeated maxima at `base` of rows and layer 1 head 2's at `trig`
// from step 1000 on.
std::vector<AlarmRecord> run_from(double base, double trig) {
  auto rs = run(0.5, trig);
  for (auto& r : rs)
    for (auto& x : r.samples)
      if (x.repeated == 20) x.repeated = 1000 * base;
  return rs;
}

std::vector<Alarm> feed_with(const char* preset, const std::vector<AlarmRecord>& rs) {
  AlarmDetector d(*AlarmParams::preset(preset));
  for (const auto& r : rs) d.feed(r);
  return d.alarms();
}

}  // namespace

TEST_CASE("growth with rising repeated maxima in one head raises a growth alarm naming it", "[alarm]") {
  const auto a = feed(run(0.5, 0.1));
  REQUIRE(a.size() == 1);
  CHECK(a[0].kind == "growth");
  CHECK(a[0].layer_index == 1);
  CHECK(a[0].head == 2);
  // 0.35 of excess log-growth over a 500-step window is reached 350 steps into a 0.5-per-500 ramp.
  CHECK(a[0].step > 1000);
  CHECK(a[0].step <= 1400);
}

TEST_CASE("growth without the repeated maxima rising raises nothing", "[alarm]") {
  CHECK(feed(run(0.5, 0.02)).empty());
}

TEST_CASE("repeated maxima rising without excess growth raise nothing", "[alarm]") {
  CHECK(feed(run(0.1, 0.1)).empty());
}

TEST_CASE("no growth alarm while the heads have not settled", "[alarm]") {
  auto rs = run(0.5, 0.1);
  for (auto& r : rs)  // every head grows 30% per 500 steps: early training
    for (auto& s : r.samples) s.sigma *= std::exp(0.3 * r.step / 500.0);
  CHECK(feed(rs).empty());
}

TEST_CASE("the detector never looks ahead: a prefix raises the alarms the whole run raised by then", "[alarm]") {
  auto rs = run(0.5, 0.1, 4000);
  rs[300].samples[3].logit_max = 900;  // a collapse in layer 0 head 3 at step 3000
  rs[350].loss = INFINITY;
  const auto whole = feed(rs);
  REQUIRE(whole.size() == 3);
  for (std::size_t n : {50u, 120u, 131u, 200u, 301u, 340u, 351u}) {
    const auto part = feed(rs, n);
    std::size_t expect = 0;
    for (const auto& a : whole) expect += a.step <= rs[n - 1].step;
    REQUIRE(part.size() == expect);
    for (std::size_t i = 0; i < part.size(); ++i) CHECK(part[i].step == whole[i].step);
  }
}

TEST_CASE("a logit collapse is raised once per layer, at the head that collapsed", "[alarm]") {
  auto rs = run(0, 0.02, 1000);
  for (std::size_t i = 50; i < rs.size(); ++i) rs[i].at(0, 1).logit_max = 20 * 30 + 10.0 * double(i);
  for (std::size_t i = 60; i < rs.size(); ++i) rs[i].at(0, 3).logit_max = 5000;
  const auto a = feed(rs);
  REQUIRE(a.size() == 1);
  CHECK(a[0].kind == "logit_collapse");
  CHECK(a[0].step == 500);
  CHECK(a[0].layer_index == 0);
  CHECK(a[0].head == 1);
}

TEST_CASE("an early collapse in a layer does not silence that layer's growth precursor later", "[alarm]") {
  // Layer 1 head 0's max logit jumps 30x at step 300 (an early collapse the loss learns through,
  // as at seed 25 of the failing config); from step 1000 layer 1 head 2 grows with rising repeated
  // maxima. Both are raised, each once: the growth rule's first case above, 1000..1400.
  auto rs = run(0.5, 0.1);
  for (std::size_t i = 30; i < 40; ++i) rs[i].at(1, 0).logit_max = 20 * 30 + 10.0 * double(i);
  const auto a = feed(rs);
  REQUIRE(a.size() == 2);
  CHECK(a[0].kind == "logit_collapse");
  CHECK(a[0].step == 300);
  CHECK(a[0].layer_index == 1);
  CHECK(a[1].kind == "growth");
  CHECK(a[1].layer_index == 1);
  CHECK(a[1].head == 2);
  CHECK(a[1].step > 1000);
  CHECK(a[1].step <= 1400);
}

TEST_CASE("a slow logit rise is no collapse", "[alarm]") {
  auto rs = run(0, 0.02, 3000);
  for (std::size_t i = 0; i < rs.size(); ++i) rs[i].at(1, 0).logit_max = 20 + 0.1 * double(i);  // to 50: never 30x in 100 steps
  for (std::size_t i = 0; i < rs.size(); ++i) rs[i].at(1, 1).logit_max = 60 + 0.5 * double(i);  // past 100, slowly
  CHECK(feed(rs).empty());
}

TEST_CASE("a loss doubling its best and a non-finite loss are run-level alarms", "[alarm]") {
  auto rs = run(0, 0.02, 1000);
  for (std::size_t i = 70; i < rs.size(); ++i) rs[i].loss = 6.0;
  auto a = feed(rs);
  REQUIRE(a.size() == 1);
  CHECK(a[0].kind == "loss_explosion");
  CHECK(a[0].layer_index == -1);
  CHECK(a[0].step == 720);  // the third 6.0 (steps 700, 710, 720) moves the median of five
  rs = run(0, 0.02, 1000);
  rs[20].loss = NAN;  // NaN: not measured, no alarm
  CHECK(feed(rs).empty());
  rs[30].nonfinite_event = true;
  a = feed(rs);
  REQUIRE(a.size() == 1);
  CHECK(a[0].kind == "non_finite");
  CHECK(a[0].step == 300);
}

TEST_CASE("a record at a step already seen is ignored", "[alarm]") {
  auto rs = run(0, 0.02, 100);
  AlarmDetector d;
  for (const auto& r : rs) d.feed(r);
  auto again = rs.back();
  again.loss = INFINITY;
  CHECK(d.feed(again).empty());
}

TEST_CASE("the readings are the quantities the rules compare, after the latest record", "[alarm]") {
  // No alarm (the repeated maxima do not rise); at step 3000 layer 1 head 2 has grown 0.5 in log
  // sigma_1 over the window beyond the settled heads' 0.005. Exact up to rounding (1e-9).
  AlarmDetector d;
  CHECK(d.readings().layers.empty());
  CHECK(std::isnan(d.readings().loss_over_best));
  for (const auto& r : run(0.5, 0.02)) d.feed(r);
  REQUIRE(d.alarms().empty());
  const Readings& x = d.readings();
  CHECK(x.step == 3000);
  CHECK(x.median_growth == Catch::Approx(0.005).margin(1e-9));
  CHECK(x.loss_over_best == Catch::Approx(1.0).margin(1e-9));  // a falling loss is at its best
  REQUIRE(x.layers.size() == 2);
  CHECK(x.layers[1].layer_index == 1);
  CHECK(x.layers[1].head == 2);
  CHECK(x.layers[1].excess_growth == Catch::Approx(0.5).margin(1e-9));
  CHECK(x.layers[1].repeated_rate == Catch::Approx(0.02).margin(1e-12));
  CHECK(x.layers[1].repeated_rate_before == Catch::Approx(0.02).margin(1e-12));
  CHECK(x.layers[0].excess_growth == Catch::Approx(0.0).margin(1e-9));
  CHECK(x.layers[0].logit_max == 20);

  // The loss doubling: the running median of the last 5 over its best, as the loss rule reads it.
  auto rs = run(0.5, 0.02, 1000);
  for (std::size_t i = rs.size() - 3; i < rs.size(); ++i) rs[i].loss = 2 * 3.0;
  AlarmDetector e;
  for (const auto& r : rs) e.feed(r);
  CHECK(e.readings().loss_over_best == Catch::Approx(6.0 / (3.0 - 0.0002 * 950)).epsilon(1e-9));
  REQUIRE(e.alarms().size() == 1);
  CHECK(e.alarms()[0].kind == "loss_explosion");
}

TEST_CASE("the named thresholds: default is the frozen fit, slow-trigger the first fit, odds-trigger the fit in odds, nothing else", "[alarm]") {
  const auto d = AlarmParams::preset("default");
  REQUIRE(d.has_value());
  CHECK(d->excess_growth == AlarmParams::frozen().excess_growth);
  CHECK(d->trigger_ratio == AlarmParams::frozen().trigger_ratio);
  CHECK(d->settled_growth == AlarmParams::frozen().settled_growth);
  const auto s = AlarmParams::preset("slow-trigger");
  REQUIRE(s.has_value());
  CHECK(s->excess_growth == 0.35);
  CHECK(s->trigger_ratio == 1.5);
  CHECK(s->settled_growth == 0.1);
  CHECK_FALSE(d->trigger_odds);
  CHECK_FALSE(s->trigger_odds);
  const auto o = AlarmParams::preset("odds-trigger");
  REQUIRE(o.has_value());
  CHECK(o->trigger_odds);
  CHECK(o->excess_growth == AlarmParams::frozen().excess_growth);
  CHECK(o->trigger_ratio == AlarmParams::frozen().trigger_ratio);
  CHECK(o->settled_growth == AlarmParams::frozen().settled_growth);
  CHECK_FALSE(AlarmParams::preset("Default").has_value());
  CHECK_FALSE(AlarmParams::preset("").has_value());
  CHECK(alarm_preset_list() == "default, slow-trigger, odds-trigger");
  CHECK(alarm_preset_names() == std::vector<std::string>{"default", "slow-trigger", "odds-trigger"});
}

TEST_CASE("slow-trigger warns of a head whose repeated maxima rise 1.7x; the default thresholds do not", "[alarm]") {
  // Every head at 10% repeated-maximum rows; layer 1 head 2 at 17% from step 1000 on (1.7x, between
  // the two sets' ratios of 1.5 and 2), its sigma growing 0.5 per 500 steps beyond its peers (above
  // both sets' excess growth).
  const auto rs = run_from(0.1, 0.17);
  CHECK(feed(rs).empty());
  const auto a = feed_with("slow-trigger", rs);
  REQUIRE(a.size() == 1);
  CHECK(a[0].kind == "growth");
  CHECK(a[0].layer_index == 1);
  CHECK(a[0].head == 2);
}

TEST_CASE("odds-trigger warns of a head already at 40% repeated-maximum rows whose odds double; the default does not", "[alarm]") {
  // 40% -> 60% of rows: the rate rises 1.5x (under the ratio of 2), its odds 0.67 -> 1.5 (2.25x).
  const auto rs = run_from(0.4, 0.6);
  CHECK(feed_with("default", rs).empty());
  const auto a = feed_with("odds-trigger", rs);
  REQUIRE(a.size() == 1);
  CHECK(a[0].kind == "growth");
  CHECK(a[0].layer_index == 1);
  CHECK(a[0].head == 2);
  // The evidence gives the odds' rise over the two windows (a mix of 40% and 60% in the recent
  // one when the alarm comes): at least the 2x the rule asks, at most the 2.25x planted.
  const auto at = a[0].evidence.find("(their odds ");
  REQUIRE(at != std::string::npos);
  const double odds = std::stod(a[0].evidence.substr(at + 12));
  CHECK(odds >= 2.0);
  CHECK(odds <= 2.25);
}

TEST_CASE("odds-trigger stays silent where the odds rise less than 2x, and agrees with the default at low rates", "[alarm]") {
  // 40% -> 55%: odds 0.67 -> 1.22 (1.83x): no alarm with either.
  const auto high = run_from(0.4, 0.55);
  CHECK(feed_with("default", high).empty());
  CHECK(feed_with("odds-trigger", high).empty());
  // 2% -> 10% (the first growth case): both raise the same alarm; 10% -> 17% (1.7x, odds 1.84x):
  // neither does.
  const auto low = run(0.5, 0.1);
  const auto d = feed_with("default", low), o = feed_with("odds-trigger", low);
  REQUIRE(d.size() == 1);
  REQUIRE(o.size() == 1);
  CHECK(o[0].step == d[0].step);
  CHECK(o[0].head == d[0].head);
  const auto slow = run_from(0.1, 0.17);
  CHECK(feed_with("default", slow).empty());
  CHECK(feed_with("odds-trigger", slow).empty());
}
