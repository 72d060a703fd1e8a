// The open question of a failed run fits the attention numerics the trace says ran: fp32
// attention answers it (not low-precision rounding), a fix that ran is named in the deciding run,
// other numerics keep the generic question, and a healthy run is left alone.
#include "catch_compat.hpp"
#include "lpdiag/analyzers/recorded_numerics.hpp"

using namespace lpdiag;
using namespace lpdiag::analysis;

namespace {
std::vector<AttentionLayerSpec> layers(const std::vector<std::pair<std::string, std::string>>& policy_fix) {
  std::vector<AttentionLayerSpec> v;
  for (std::size_t i = 0; i < policy_fix.size(); ++i) {
    AttentionLayerSpec s;
    s.layer_index = static_cast<std::int64_t>(i), s.n_heads = 4, s.head_dim = 64;
    s.policy = policy_fix[i].first, s.fix = policy_fix[i].second;
    v.push_back(s);
  }
  return v;
}
ChainResult failed_with_open_question() {
  ChainResult c;
  c.run.healthy = false;
  c.run.failure = {"loss_explosion", 10, 2, "test"};
  c.decide = deciding_run();
  c.findings = {"no causal chain: missing C2", "whether attention numerics caused this failure is open; " + c.decide};
  c.open_finding = 1;
  return c;
}
const std::string none = R"({"kind":"none"})";
}  // namespace

TEST_CASE("recorded numerics: fp32 attention in every layer answers the open question", "[analyzers][numerics]") {
  for (const auto& p : {std::string("fp32"), std::string("external:sdpa-fp32")}) {
    const RecordedNumerics n = recorded_numerics(layers({{p, none}, {p, none}}));
    CHECK(n.all_fp32);
    ChainResult c = failed_with_open_question();
    account_for_numerics(c, n);
    CHECK(c.decide.empty());
    CHECK(c.open_finding == -1);
    CHECK(c.findings[1].find("attention ran in fp32 in every layer (policy " + p + ")") != std::string::npos);
  }
}

TEST_CASE("recorded numerics: one bf16 layer, or PyTorch's own attention of unknown precision, keeps the question", "[analyzers][numerics]") {
  for (const auto& ls : {layers({{"fp32", none}, {"fa2", none}}), layers({{"external:sdpa", none}})}) {
    const RecordedNumerics n = recorded_numerics(ls);
    CHECK_FALSE(n.all_fp32);
    ChainResult c = failed_with_open_question();
    const auto before = c.findings;
    account_for_numerics(c, n);
    CHECK(c.findings == before);
    CHECK(c.open_finding == 1);
  }
}

TEST_CASE("recorded numerics: a run that ran a fix is decided without it", "[analyzers][numerics]") {
  const RecordedNumerics n = recorded_numerics(layers({{"seed-mma:tile=512", R"({"kind":"paper","beta":2.0,"tol":0.001})"},
                                                       {"seed-mma:tile=512", R"({"kind":"paper","beta":2.0,"tol":0.001})"}}));
  CHECK(n.fix == "paper");
  CHECK(n.policy == "seed-mma:tile=512");
  ChainResult c = failed_with_open_question();
  account_for_numerics(c, n);
  CHECK(c.decide.find("without the fix this run ran (paper; --fix none)") != std::string::npos);
  CHECK(c.findings[1].find(c.decide) != std::string::npos);
  CHECK(c.open_finding == 1);
}

TEST_CASE("recorded numerics: a healthy run, or a trace without attention layers, is left alone", "[analyzers][numerics]") {
  ChainResult healthy;
  healthy.run.healthy = true;
  account_for_numerics(healthy, recorded_numerics(layers({{"fp32", none}})));
  CHECK(healthy.findings.empty());
  ChainResult c = failed_with_open_question();
  const RecordedNumerics n = recorded_numerics({});
  CHECK_FALSE(n.known);
  account_for_numerics(c, n);
  CHECK(c.open_finding == 1);
}

TEST_CASE("recorded numerics: attention lpdiag did not run says so for the trigger and the bias", "[analyzers][numerics]") {
  auto with_missing_links = [] {
    ChainResult c;
    c.run.healthy = true;
    c.links[0].id = "C1", c.links[0].name = "trigger (repeated maxima)", c.links[0].evidence = "no attention counters in the trace";
    c.links[1].id = "C2", c.links[1].name = "biased rounding (delta error)",
    c.links[1].evidence = "the trace holds no delta-error statistics (they are recorded at level \"full\": lpdiag.Monitor(..., full_every=N), gpt2_train --level full)";
    for (int i : {0, 1}) c.findings.push_back(c.links[i].id + " " + c.links[i].name + " not found: " + c.links[i].evidence);
    return c;
  };
  ChainResult c = with_missing_links();
  const RecordedNumerics n = recorded_numerics(layers({{"external:sdpa", none}, {"external:sdpa", none}}));
  CHECK(n.all_external);
  CHECK_FALSE(n.all_fp32);
  account_for_numerics(c, n);
  for (int i : {0, 1}) {
    CHECK(c.links[i].evidence.find("not recorded: attention ran in a kernel lpdiag did not run") != std::string::npos);
    CHECK(c.findings[i].find("not found: not recorded") != std::string::npos);
  }
  // One layer lpdiag ran: its counters exist, the evidence stays as the links found it.
  ChainResult mixed = with_missing_links();
  account_for_numerics(mixed, recorded_numerics(layers({{"external:sdpa", none}, {"fa2", none}})));
  CHECK(mixed.links[1].evidence.find("recorded at level") != std::string::npos);
}

TEST_CASE("recorded numerics: a paper-fix run that turned non-finite is told the fix can underflow", "[analyzers][numerics]") {
  ChainResult c = failed_with_open_question();
  c.run.failure = {"non_finite", 17, 3, "the loss became non-finite"};
  c.run.max_logit = 63.9;
  account_for_numerics(c, recorded_numerics(layers({{"fa2", R"({"kind":"paper","beta":2.0,"tol":0.001})"}})));
  REQUIRE(c.findings.size() == 3);
  CHECK(c.findings[1].find("underflows fp32 once a logit passes ~87") != std::string::npos);
  CHECK(c.findings[1].find("63.9") != std::string::npos);
  REQUIRE(c.open_finding == 2);  // still the question, moved down by one
  CHECK(c.findings[2].find("without the fix this run ran (paper") != std::string::npos);
  // A loss explosion of a paper-fix run, or a non-finite run without the fix: no such sentence.
  ChainResult other = failed_with_open_question();
  account_for_numerics(other, recorded_numerics(layers({{"fa2", R"({"kind":"paper"})"}})));
  CHECK(other.findings.size() == 2);
}

TEST_CASE("recorded numerics: the fix's counterfactual replaces the generic one in any form of the open question", "[analyzers][numerics]") {
  // A found chain's question ("order and correlation suggest ...") keeps its form; only the run to
  // make changes. Its `decide` is empty (a chain sets none) and stays so.
  ChainResult c;
  c.run.healthy = false;
  c.run.failure = {"loss_explosion", 900, 40, "test"};
  c.found = true;
  c.findings = {"causal chain at layer 1 head 2", "order and correlation suggest, they do not prove: a counterfactual run decides (" +
                                                      deciding_run() + ")"};
  c.open_finding = 1;
  account_for_numerics(c, recorded_numerics(layers({{"fa2", R"({"kind":"safe"})"}})));
  CHECK(c.findings[1].rfind("order and correlation suggest", 0) == 0);
  CHECK(c.findings[1].find("without the fix this run ran (safe; --fix none)") != std::string::npos);
  CHECK(c.findings[1].find(kFp32OrFix) == std::string::npos);
  CHECK(c.decide.empty());
}
