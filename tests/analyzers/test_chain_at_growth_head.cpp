// The chain is asked for in the head whose W_Q grew when its trigger never stepped up there. In
// the lr 1e-3 GPT-2-small failure at seed 10 the growing head's repeated-max rate rose from 3% to
// 65% and fell back to 12-20% before the failure, a rise and fall that steps up over no trend,
// while the strongest step up came in another head at the failure itself and the strongest bias
// in a third: the links were "not localized together" although the growing head held the bias
// and a trigger far beyond C1's margin. Planted here: head (1, 2) with a repeated-max rate that
// rises from 0.3% to 40% and falls back, a biased delta error from record 450 that drives its
// sigma_1, and its layer's aligned updates; head (0, 1) steps up from 0.3% to 50% at record 900,
// just before the loss explodes at 930. The chain (decided or a candidate) is at (1, 2), its
// trigger "present at the growth's head". Without the bias at (1, 2) no chain is named there.
// Binomial counts and noise from a seed chosen once, printed.
#include <algorithm>
#include <cmath>
#include <string>

#include "catch_compat.hpp"
#include "planted_run.hpp"
#include "temp_dir.hpp"
#include "test_seed.hpp"

namespace {

// The rate of head (1, 2): 0.3% to record 300, up to 40% at 500, back to 0.3% by 700.
double hump(int r) {
  if (r < 300 || r >= 700) return 0.003;
  return r < 500 ? 0.003 + 0.397 * (r - 300) / 200.0 : 0.4 - 0.397 * (r - 500) / 200.0;
}

lpdiag::analysis::ChainResult chain_in(const std::string& name, unsigned seed, bool bias) {
  lpdiag_test::PlantedRun run;
  auto grows = [](int l, int h) { return l == 1 && h == 2; };
  run.repeated_rate = [&](int l, int h, int r) { return grows(l, h) ? hump(r) : l == 0 && h == 1 && r >= 900 ? 0.5 : 0.003; };
  run.biased = [&](int l, int h, int r) { return bias && grows(l, h) && r >= 450; };
  // sigma_1 grows with the bias where there is one, and on its own otherwise (the same total,
  // 2.5x by the end), from record 470.
  run.growth = [&](int l, int h, int r, double z) {
    if (!grows(l, h) || r < 470) return 0.0;
    return bias ? 0.004 * std::max(0.0, z) / 8.0 : std::log(2.5) / 530.0;
  };
  run.aligned = [](int l, int r) { return l == 1 && r >= 600; };
  return lpdiag_test::chain_of(lpdiag_test::temp_path("chain_at_growth_head", name), seed, run);
}

}  // namespace

TEST_CASE("a trigger that rose and fell at the growing head, with its bias there, places the chain in that head", "[analyzers]") {
  const unsigned seed = static_cast<unsigned>(lpdiag_test::seed("test_chain_at_growth_head", 3340917u));
  const auto c = chain_in("hump.h5", seed, true);
  lpdiag_test::print_chain("bias at the growing head", c);
  const auto& c1 = c.links[0];
  const auto& c2 = c.links[1];
  REQUIRE(c1.present);
  CHECK(c1.layer_index == 1);
  CHECK(c1.head == 2);
  CHECK(c1.evidence.find("present at the growth's head") != std::string::npos);
  CHECK(c1.evidence.find("the strongest step up is at layer 0 head 1") != std::string::npos);
  REQUIRE(c2.present);
  CHECK(c2.layer_index == 1);
  CHECK(c2.head == 2);
  CHECK(c.layer_index == 1);  // a chain or a candidate, at the growing head
  CHECK(c.head == 2);

  const auto none = chain_in("no-bias.h5", seed + 1, false);
  lpdiag_test::print_chain("no bias", none);
  CHECK_FALSE((none.layer_index == 1 && none.head == 2));
}
