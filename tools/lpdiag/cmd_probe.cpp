// `lpdiag probe`: the CI check for kernel authors. Runs the chosen numerics on adversarial input
// families with fixed seeds and fails (exit 1) when the O or delta error is biased beyond what a
// bf16 output must carry: every case first gets the `exact-rounding` row (the fp64 result
// rounded once to bf16, the best any bf16-output kernel can do), and a row fails when its O or
// delta error is more biased than that row's: |z| > max(|z_exact| + --fail-z, 1.1 |z_exact|)
// (or it has non-finite outputs). Being less biased than exact rounding never fails.
#include <fmt/core.h>

#include <algorithm>
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
  int seeds = 1;
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

  if (a.seeds < 1) throw InvalidArgument("--seeds must be >= 1");

  nlohmann::json results = nlohmann::json::array();
  std::vector<JunitCase> cases;
  int failures = 0;
  if (!a.json)
    std::cout << fmt::format("{:<13} {:<6} {:<4} ", "family", "causal", "seed") << format_table_header()
              << fmt::format(" {:>9} {:>9} {:>9}", "O |z|-ex", "δ |z|-ex", "O rms") << "\n";
  for (const auto& fam : families) {
    for (bool causal : causal_modes) {
      for (int si = 0; si < a.seeds; ++si) {
        const ProbeCase pc = make_probe_case(fam, causal, kProbeSeed + static_cast<std::uint64_t>(si));
        const AttentionInputs in{pc.q.data(), pc.k.data(), pc.v.data(), pc.dout.data(), pc.B, pc.H, pc.N, pc.d};
        const std::string lead = fmt::format("{:<13} {:<6} {:<4} ", fam, causal ? "yes" : "no", si);
        // The reference, and the exact-rounding row every other row is judged against.
        AttentionConfig rc = policies.front();
        rc.causal = causal;
        AttentionOptions ropt;
        ropt.backward = false;
        ropt.keep_reference = true;
        const AttentionRun ref = run_attention(rc, in, ropt);
        const std::vector<float> exact_o = correctly_rounded_output(ref);
        const AttentionSummary ex = summarize_output("exact-rounding", "-", output_errors(ref, exact_o.data(), pc.dout.data()));
        if (a.json) {
          nlohmann::json j = to_json(ex);
          j["family"] = fam, j["causal"] = causal, j["seed"] = si, j["failed"] = false;
          results.push_back(j);
        } else {
          std::cout << lead << format_table_row(ex) << fmt::format(" {:>9} {:>9} {:>9.3e}", "", "", ex.o_err_rms) << "\n";
        }
        for (AttentionConfig c : policies) {
          for (const FixConfig& f : fixes) {
            c.fix = f;
            c.causal = causal;
            const AttentionSummary s = summarize(c, run_attention(c, in));
            const double dz_o = std::fabs(s.o_err_z) - std::fabs(ex.o_err_z);
            const double dz_d = std::fabs(s.delta_err_z) - std::fabs(ex.delta_err_z);
            auto worse = [&](double z, double z_exact) {
              return !(std::fabs(z) <= std::max(std::fabs(z_exact) + a.fail_z, 1.1 * std::fabs(z_exact)));
            };
            const bool biased = worse(s.o_err_z, ex.o_err_z) || worse(s.delta_err_z, ex.delta_err_z);
            const bool nan = s.nan_count > 0;
            const bool failed = biased || nan;
            failures += failed;
            std::string why;
            if (biased)
              why = fmt::format("biased rounding: O error z {:+.2f}, delta error z {:+.2f}; exact rounding {:+.2f}, {:+.2f} "
                                "(more biased than exact rounding by > {} z or 10%)",
                                s.o_err_z, s.delta_err_z, ex.o_err_z, ex.delta_err_z, a.fail_z);
            if (nan) why += (why.empty() ? "" : "; ") + fmt::format("{} non-finite outputs", s.nan_count);
            const std::string name = fmt::format("{}/{}/seed{}/{}/{}", fam, causal ? "causal" : "noncausal", si, s.policy, s.fix);
            cases.push_back({"lpdiag.probe", name, failed, why, pc.description});
            if (a.json) {
              nlohmann::json j = to_json(s);
              j["family"] = fam, j["causal"] = causal, j["seed"] = si, j["failed"] = failed;
              j["o_err_excess_abs_z"] = dz_o, j["delta_err_excess_abs_z"] = dz_d;
              j["exact_rounding"] = {{"o_err_z", ex.o_err_z}, {"delta_err_z", ex.delta_err_z}, {"o_err_rms", ex.o_err_rms}};
              results.push_back(j);
            } else {
              std::cout << lead << format_table_row(s) << fmt::format(" {:>+9.2f} {:>+9.2f} {:>9.3e}", dz_o, dz_d, s.o_err_rms)
                        << (failed ? "  FAIL" : "") << "\n";
            }
          }
        }
      }
    }
  }
  if (!a.junit.empty()) write_junit(a.junit, "lpdiag probe", cases);
  if (a.json)
    std::cout << nlohmann::json{{"fail_z", a.fail_z}, {"failures", failures}, {"results", results}}.dump(2) << "\n";
  else
    std::cout << (failures ? fmt::format("{} of {} probes FAILED (more biased than exact rounding, --fail-z {}, or NaN)\n", failures, cases.size(), a.fail_z)
                           : fmt::format("all {} probes passed (no more biased than exact rounding, --fail-z {})\n", cases.size(), a.fail_z));
  return failures ? kFinding : kOk;
}

}  // namespace

Registration register_probe(CLI::App& app) {
  auto args = std::make_shared<ProbeArgs>();
  CLI::App* sub = app.add_subcommand("probe", "CI check: flag attention numerics that round with a bias on adversarial inputs");
  sub->add_option("--family", args->families, "Families (default all): iid, sinks, dup-keys, skewed-v, large-logits, long-rows, zero-max, strong-sinks")->delimiter(',');
  sub->add_option("--seeds", args->seeds, "Seeds per family and causal mode (the fixed seed, then the next ones)")->capture_default_str();
  sub->add_option("-p,--policy", args->policies, "Comma-separated policies: fa2, fa2-seq, seed, fp32, fp8-p, fp8-p:e5m2")->capture_default_str();
  sub->add_option("-f,--fix", args->fixes, "Comma-separated fixes: none, paper, safe (paper:beta=7,tol=1e-3)")->capture_default_str();
  sub->add_option("--causal", args->causal, "yes, no or both")->capture_default_str();
  sub->add_option("--fail-z", args->fail_z, "Fail when |z| of the O or delta error exceeds exact rounding's |z| by more than this (and by 10%)")->capture_default_str();
  sub->add_flag("--json", args->json, "Print one JSON object on stdout");
  sub->add_option("--junit", args->junit, "Also write JUnit XML to this file");
  return {sub, [args] { return run_probe(*args); }};
}

}  // namespace lpdiag::cli
