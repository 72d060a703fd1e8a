// C3 is asked for in the growing head's layer when the strongest aligned update is in another.
// C3 reads a layer's whole W_Q update, and in a run more than one layer's updates can align: in
// an lr 1e-3 GPT-2-small failure the trigger, the bias and the growth were all in one head of
// layer 1 while layer 2's update similarity stepped up further, and the links were "not
// localized together" (a guard that switched layer 1 alone kept the same run healthy). Planted
// here: head (1, 2) whose repeated-max rate steps up at record 300, with a biased delta error from
// record 450 that drives its sigma_1 from 470, and layer 1's updates aligning from record 600
// (similarity 0.2 -> 0.6); layer 0's updates align further (0.2 -> 0.95) from record 500; the
// loss explodes at 930. The chain (decided or a candidate) is at (1, 2) with C3 in layer 1, its
// evidence naming layer 0 as the strongest. Without layer 1's alignment, C3 stays in layer 0 and
// no chain is named: the link is asked there, not made up. Noise from a seed chosen once, printed.
#include <algorithm>
#include <string>

#include "catch_compat.hpp"
#include "planted_run.hpp"
#include "temp_dir.hpp"
#include "test_seed.hpp"

namespace {

lpdiag::analysis::ChainResult chain_in(const std::string& name, unsigned seed, bool layer1_aligns) {
  lpdiag_test::PlantedRun run;
  auto chain_head = [](int l, int h) { return l == 1 && h == 2; };
  run.repeated_rate = [&](int l, int h, int r) { return chain_head(l, h) && r >= 300 ? 0.3 : 0.003; };
  run.biased = [&](int l, int h, int r) { return chain_head(l, h) && r >= 450; };
  run.growth = [&](int l, int h, int r, double z) { return chain_head(l, h) && r >= 470 ? 0.004 * std::max(0.0, z) / 8.0 : 0.0; };
  run.aligned = [&](int l, int r) { return l == 0 ? r >= 500 : layer1_aligns && r >= 600; };
  run.aligned_similarity = [](int l) { return l == 0 ? 0.95 : 0.6; };
  return lpdiag_test::chain_of(lpdiag_test::temp_path("updates_at_growth_layer", name), seed, run);
}

}  // namespace

TEST_CASE("aligned updates in the growing head's layer are the chain's, though another layer's aligned further", "[analyzers]") {
  const unsigned seed = static_cast<unsigned>(lpdiag_test::seed("test_updates_at_growth_layer", 6120457u));
  const auto c = chain_in("two-layers.h5", seed, true);
  lpdiag_test::print_chain("both layers aligned", c);
  const auto& c3 = c.links[2];
  REQUIRE(c3.present);
  CHECK(c3.layer_index == 1);
  CHECK(c3.evidence.find("the strongest step up is in layer 0") != std::string::npos);
  CHECK(c.rejected_because.empty());
  CHECK(c.layer_index == 1);  // a chain or a candidate, at the growing head
  CHECK(c.head == 2);

  const auto other = chain_in("layer0-only.h5", seed + 1, false);
  lpdiag_test::print_chain("only layer 0 aligned", other);
  REQUIRE(other.links[2].present);
  CHECK(other.links[2].layer_index == 0);
  CHECK(other.rejected_because.find("not localized together") != std::string::npos);
}
