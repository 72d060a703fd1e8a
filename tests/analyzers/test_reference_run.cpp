// The counterfactual comparison: attributable when only RUN fails, not when both fail alike,
// undecided when RUN is healthy or REF fails another way; config differences are reported.
#include "catch_compat.hpp"
#include "lpdiag/analyzers/reference_run.hpp"

using namespace lpdiag::analysis;

namespace {
ChainResult with_verdict(bool healthy, const std::string& kind = "", std::int64_t step = -1) {
  ChainResult c;
  c.run.healthy = healthy;
  if (!healthy) c.run.failure = {kind, step, 0, "test"}, c.run.signs = {c.run.failure};
  return c;
}
const std::string cfg = R"({"lr":0.006,"seed":1,"policy":"fa2","attention":"lpdiag"})";
const std::string cfg_fp32 = R"({"lr":0.006,"seed":1,"policy":"fa2","attention":"sdpa-fp32"})";
}  // namespace

TEST_CASE("reference: RUN fails and REF does not -> attributable", "[reference]") {
  const auto r = compare_with_reference("ref.h5", with_verdict(false, "loss_explosion", 700), with_verdict(true), cfg, cfg_fp32);
  REQUIRE(r.attributable.has_value());
  CHECK(*r.attributable);
  CHECK_FALSE(r.failed);
  CHECK(r.config_differences.empty());  // attention differs, which is the point
}

TEST_CASE("reference: both fail alike -> not attributable", "[reference]") {
  const auto r = compare_with_reference("ref.h5", with_verdict(false, "attention_logit_growth", 3), with_verdict(false, "loss_explosion", 22),
                                        cfg, cfg_fp32);
  REQUIRE(r.attributable.has_value());
  CHECK_FALSE(*r.attributable);
  CHECK(r.failed);
}

TEST_CASE("reference: REF non-finite where RUN was not, or RUN healthy -> undecided", "[reference]") {
  CHECK_FALSE(compare_with_reference("r", with_verdict(false, "loss_explosion", 5), with_verdict(false, "non_finite", 9), cfg, cfg).attributable);
  CHECK_FALSE(compare_with_reference("r", with_verdict(true), with_verdict(false, "loss_explosion", 9), cfg, cfg).attributable);
}

TEST_CASE("reference: differences beyond the numerics are named", "[reference]") {
  const auto r = compare_with_reference("r", with_verdict(false, "loss_explosion", 5), with_verdict(true), cfg,
                                        R"({"lr":0.001,"seed":1,"policy":"fa2","attention":"sdpa-fp32"})");
  REQUIRE(r.config_differences.size() == 1);
  CHECK(r.config_differences[0].find("lr") == 0);
  CHECK(r.evidence.find("weaker") != std::string::npos);
}

TEST_CASE("reference: a REF without logits is judged by its loss when RUN failed on logits", "[reference]") {
  ChainResult run = with_verdict(false, "attention_logit_growth", 3);
  run.run.final_loss = 2.374, run.run.max_logit = 17000;
  ChainResult same = with_verdict(true), better = with_verdict(true);
  same.run.final_loss = 2.373, better.run.final_loss = 1.9;  // max_logit -1: none recorded
  const auto a = compare_with_reference("r", run, same, cfg, cfg_fp32);
  REQUIRE(a.attributable.has_value());
  CHECK_FALSE(*a.attributable);
  const auto b = compare_with_reference("r", run, better, cfg, cfg_fp32);
  REQUIRE(b.attributable.has_value());
  CHECK(*b.attributable);
}

TEST_CASE("reference: a REF that stopped learning (loss plateau) does not show that other numerics save RUN", "[reference]") {
  ChainResult run = with_verdict(false, "attention_logit_growth", 9);
  run.run.final_loss = 2.679, run.run.max_logit = 23900;
  ChainResult stuck = with_verdict(true);
  stuck.run.final_loss = 2.448;  // 9% lower, no logits recorded (session 18's fp32 arm at lr 3e-3)
  stuck.run.warnings = {{"loss_plateau", 42, 10, "test"}};
  const auto a = compare_with_reference("r", run, stuck, cfg, cfg_fp32);
  CHECK_FALSE(a.attributable.has_value());
  CHECK(a.evidence.find("stopped learning too") != std::string::npos);
  stuck.run.max_logit = 50;  // REF with logits, healthy by them, still on a plateau
  const auto b = compare_with_reference("r", run, stuck, cfg, cfg_fp32);
  CHECK_FALSE(b.attributable.has_value());
  stuck.run.final_loss = 2.67;  // the same loss: fails alike
  stuck.run.max_logit = -1;
  const auto c = compare_with_reference("r", run, stuck, cfg, cfg_fp32);
  REQUIRE(c.attributable.has_value());
  CHECK_FALSE(*c.attributable);
}
