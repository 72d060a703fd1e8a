// The speed-target arithmetic of bench_attention (bench/attention_targets.hpp), on timings
// taken from a real H200 run (docs/results/performance.md) and on edge cases.
#include "../../bench/attention_targets.hpp"

#include "catch_compat.hpp"

using lpdiag::bench::check_targets;
using lpdiag::bench::Timing;

namespace {

const lpdiag::bench::TargetCheck* find(const std::vector<lpdiag::bench::TargetCheck>& v, const std::string& shape,
                                       const std::string& target) {
  for (const auto& c : v)
    if (c.shape == shape && c.target == target) return &c;
  return nullptr;
}

}  // namespace

TEST_CASE("targets from a recorded run: the ratios the docs quote", "[bench]") {
  // ms from one H200 run (B16 H12 N1024 d64 causal, B4 H16 N4096 d128 non-causal).
  const std::vector<Timing> rows = {
      {"d64", "lpdiag off", 0.216, 0.481},      {"d64", "lpdiag counters", 0.266, 0.481},
      {"d64", "lpdiag full", 0.360, 0.548},     {"d64", "sdpa flash", 0.154, 0.533},
      {"d64", "sdpa cudnn", 0.104, 0.369},      {"d128nc", "lpdiag off", 2.494, 6.222},
      {"d128nc", "lpdiag counters", 2.734, 6.211}, {"d128nc", "lpdiag full", 3.820, 6.299},
      {"d128nc", "sdpa flash", 1.605, 4.939},
  };
  const auto v = check_targets(rows);
  REQUIRE(v.size() == 7);  // d64: vs cudnn, vs flash, two over-off; d128nc (no cudnn row): vs flash, two over-off
  const auto* cu = find(v, "d64", "counters vs sdpa cudnn");
  REQUIRE(cu != nullptr);
  CHECK(cu->value == Catch::Approx((0.104 + 0.369) / (0.266 + 0.481)).epsilon(1e-9));
  CHECK_FALSE(cu->met);
  CHECK(cu->gating);
  CHECK(find(v, "d128nc", "counters vs sdpa cudnn") == nullptr);
  // Ratios to 1e-9: they are quotients of the numbers above, nothing else.
  const auto* a = find(v, "d64", "counters vs sdpa flash");
  REQUIRE(a != nullptr);
  CHECK(a->value == Catch::Approx((0.154 + 0.533) / (0.266 + 0.481)).epsilon(1e-9));
  CHECK_FALSE(a->met);
  CHECK_FALSE(a->gating);  // flash is reported, cuDNN is the baseline
  const auto* b = find(v, "d64", "counters over off");
  REQUIRE(b != nullptr);
  CHECK(b->value == Catch::Approx(0.747 / 0.697 - 1.0).epsilon(1e-9));
  CHECK_FALSE(b->met);  // +7.2%
  const auto* c = find(v, "d128nc", "counters over off");
  REQUIRE(c != nullptr);
  CHECK(c->met);  // +2.6%
  const auto* d = find(v, "d128nc", "full over off");
  REQUIRE(d != nullptr);
  CHECK(d->met);  // +16.1%
  CHECK(d->limit == 0.25);
  CHECK(v.front().shape == "d64");  // order of first appearance
}

TEST_CASE("targets: a shape without SDPA rows gets no comparison with it", "[bench]") {
  const auto v = check_targets({{"s", "lpdiag off", 1.0, 2.0}, {"s", "lpdiag counters", 1.1, 2.0}});
  REQUIRE(v.size() == 1);
  CHECK(v[0].target == "counters over off");
  CHECK(v[0].value == Catch::Approx(0.1 / 3.0).epsilon(1e-9));
  CHECK(v[0].met);
}

TEST_CASE("targets: either side of each limit, zero times ignored", "[bench]") {
  // Totals of 2 ms for off; 0.05% either side of +5% and +25%, and SDPA cuDNN exactly as fast.
  auto run = [](double counters, double full, double cudnn) {
    return check_targets({{"s", "lpdiag off", 1.0, 1.0},
                          {"s", "lpdiag counters", counters, 1.0},
                          {"s", "lpdiag full", full, 1.0},
                          {"s", "sdpa cudnn", cudnn, 1.0}});
  };
  const auto in = run(1.099, 1.499, 1.099);  // +4.95%, +24.95%, 1.0x
  REQUIRE(in.size() == 3);
  for (const auto& c : in) CHECK(c.met);
  const auto out = run(1.101, 1.501, 1.1);  // +5.05%, +25.05%, 2.1 / 2.101 < 1
  REQUIRE(out.size() == 3);
  CHECK_FALSE(find(out, "s", "counters over off")->met);
  CHECK_FALSE(find(out, "s", "full over off")->met);
  CHECK_FALSE(find(out, "s", "counters vs sdpa cudnn")->met);
  CHECK(check_targets({{"z", "lpdiag off", 0.0, 0.0}, {"z", "lpdiag counters", 1.0, 1.0}}).empty());
  const auto f = check_targets({{"f", "lpdiag counters", 0.5, 1.0}, {"f", "sdpa flash", 1.0, 2.0}});
  REQUIRE(f.size() == 1);
  CHECK(f[0].value == Catch::Approx(2.0).epsilon(1e-9));
  CHECK(f[0].met);
}
