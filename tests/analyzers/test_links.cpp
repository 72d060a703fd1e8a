// Link analyzers and the chain on specific synthetic cases, including bad and degenerate input.
#include <filesystem>

#include "catch_compat.hpp"
#include "temp_dir.hpp"
#include "lpdiag/analyzers/chain.hpp"
#include "lpdiag/analyzers/synth.hpp"
#include "lpdiag/error.hpp"

using namespace lpdiag::analysis;

namespace {
std::string tmp(const std::string& n) { return lpdiag_test::temp_path("links", n); }
}  // namespace

TEST_CASE("a planted chain is found with every link in order at the planted place", "[analyzers]") {
  SynthOptions o;
  o.seed = 42;
  o.gap_fraction = 0.1;  // 10% of records unmeasured
  const SynthTruth t = write_synth_trace(tmp("chain.h5"), o);
  const ChainResult c = reconstruct_chain(bin_traces(t.files));
  REQUIRE(c.found);
  CHECK(c.layer_index == t.layer_index);
  CHECK(c.head == t.head);
  for (int k = 0; k + 1 < 5; ++k) CHECK(c.links[k].onset_step <= c.links[k + 1].onset_step);
  CHECK(c.missing_links.empty());
  CHECK(c.confidence > 0.3);
  CHECK(c.correlation.r > 0);
}

TEST_CASE("null traces name the missing link instead of inventing a chain", "[analyzers]") {
  SynthOptions o;
  o.seed = 7;
  o.kind = SynthKind::loss_spike;
  ChainResult c = reconstruct_chain(bin_traces(write_synth_trace(tmp("spike.h5"), o).files));
  CHECK_FALSE(c.found);
  CHECK(c.links[4].present);
  CHECK(std::find(c.missing_links.begin(), c.missing_links.end(), "C2") != c.missing_links.end());
  o.kind = SynthKind::bias_no_growth;
  c = reconstruct_chain(bin_traces(write_synth_trace(tmp("bias.h5"), o).files));
  CHECK_FALSE(c.found);
  CHECK(c.links[1].present);
  CHECK_FALSE(c.links[3].present);
}

TEST_CASE("two rank files of one run are analyzed together", "[analyzers]") {
  SynthOptions o;
  o.seed = 99;
  o.ranks = 2;
  const SynthTruth t = write_synth_trace(tmp("ranked.h5"), o);
  REQUIRE(t.files.size() == 2);
  CHECK(t.files[0].find(".rank0.h5") != std::string::npos);
  const BinnedTrace bt = bin_traces(t.files);
  CHECK(bt.records > 0);
  const ChainResult c = reconstruct_chain(bt);
  CHECK(c.found);
}

TEST_CASE("analyzers refuse unusable input with InputError", "[analyzers]") {
  CHECK_THROWS_AS(bin_traces({tmp("missing.h5")}), lpdiag::InputError);
  CHECK_THROWS_AS(bin_traces({}), lpdiag::InvalidArgument);
}
