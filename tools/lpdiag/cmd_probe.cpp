// `lpdiag probe`: the CI check for kernel authors. Runs the chosen numerics on adversarial input
// families with fixed seeds and fails (exit 1) when the O or delta error is biased: |z| above
// --fail-z against the fp64 reference.
#include <fmt/core.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "attention_report.hpp"
#include "junit.hpp"
#include "lpdiag/attention/probe_families.hpp"
#include "lpdiag/command.hpp"
#include "lpdiag/error.hpp"

namespace lpdiag::cli {
namespace {

struct ProbeArgs {
  std::vector<std::string> families;
  std::string policies = "fa2";
  std::string fixes = "none";
  std::string causal = "both";
  double fail_z = 4.0;
  bool json = false;
  std::string junit;
};

int run_probe(const ProbeArgs& a) {
  const auto policies = parse_policy_list(a.policies);
  const auto fixes = parse_fix_list(a.fixes);
  std::vector<std::string> families = a.families.empty() ? probe_family_names() : a.families;
  std::vector<bool> causal_modes;
  if (a.causal == "both") causal_modes = {false, true};
  else if (a.causal == "yes") causal_modes = {true};
  else if (a.causal == "no") causal_modes = {false};
  else throw InvalidArgument("--causal must be yes, no or both");
  if (!(a.fail_z > 0)) throw InvalidArgument("--fail-z must be > 0");

  nlohmann::json results = nlohmann::json::array();
  std::vector<JunitCase> cases;
  int failures = 0;
  if (!a.json) std::cout << fmt::format("{:<13} {:<6} ", "family", "causal") << format_table_header() << "\n";
  for (const auto& fam : families) {
    for (bool causal : causal_modes) {
      const ProbeCase pc = make_probe_case(fam, causal);
      const AttentionInputs in{pc.q.data(), pc.k.data(), pc.v.data(), pc.dout.data(), pc.B, pc.H, pc.N, pc.d};
      for (AttentionConfig c : policies) {
        for (const FixConfig& f : fixes) {
          c.fix = f;
          c.causal = causal;
          const AttentionSummary s = summarize(c, run_attention(c, in));
          const bool biased = std::fabs(s.o_err_z) > a.fail_z || std::fabs(s.delta_err_z) > a.fail_z;
          const bool nan = s.nan_count > 0;
          const bool failed = biased || nan;
          failures += failed;
          std::string why;
          if (biased) why = fmt::format("biased rounding: O error z {:+.2f}, delta error z {:+.2f} (|z| > {})", s.o_err_z, s.delta_err_z, a.fail_z);
          if (nan) why += (why.empty() ? "" : "; ") + fmt::format("{} non-finite outputs", s.nan_count);
          const std::string name = fmt::format("{}/{}/{}/{}", fam, causal ? "causal" : "noncausal", s.policy, s.fix);
          cases.push_back({"lpdiag.probe", name, failed, why, pc.description});
          if (a.json) {
            nlohmann::json j = to_json(s);
            j["family"] = fam;
            j["causal"] = causal;
            j["failed"] = failed;
            results.push_back(j);
          } else {
            std::cout << fmt::format("{:<13} {:<6} ", fam, causal ? "yes" : "no") << format_table_row(s)
                      << (failed ? "  FAIL" : "") << "\n";
          }
        }
      }
    }
  }
  if (!a.junit.empty()) write_junit(a.junit, "lpdiag probe", cases);
  if (a.json)
    std::cout << nlohmann::json{{"fail_z", a.fail_z}, {"failures", failures}, {"results", results}}.dump(2) << "\n";
  else
    std::cout << (failures ? fmt::format("{} of {} probes FAILED (|z| > {} or NaN)\n", failures, cases.size(), a.fail_z)
                           : fmt::format("all {} probes passed (|z| <= {})\n", cases.size(), a.fail_z));
  return failures ? kFinding : kOk;
}

}  // namespace

Registration register_probe(CLI::App& app) {
  auto args = std::make_shared<ProbeArgs>();
  CLI::App* sub = app.add_subcommand("probe", "CI check: flag attention numerics that round with a bias on adversarial inputs");
  sub->add_option("--family", args->families, "Families (default all): iid, sinks, dup-keys, skewed-v, large-logits, long-rows, zero-max")->delimiter(',');
  sub->add_option("-p,--policy", args->policies, "Comma-separated policies: fa2, seed, fp32, fp8-p, fp8-p:e5m2")->capture_default_str();
  sub->add_option("-f,--fix", args->fixes, "Comma-separated fixes: none, paper, safe (paper:beta=7,tol=1e-3)")->capture_default_str();
  sub->add_option("--causal", args->causal, "yes, no or both")->capture_default_str();
  sub->add_option("--fail-z", args->fail_z, "Fail when |z| of the O or delta error exceeds this")->capture_default_str();
  sub->add_flag("--json", args->json, "Print one JSON object on stdout");
  sub->add_option("--junit", args->junit, "Also write JUnit XML to this file");
  return {sub, [args] { return run_probe(*args); }};
}

}  // namespace lpdiag::cli
