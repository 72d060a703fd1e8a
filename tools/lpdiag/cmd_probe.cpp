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
#include <sstream>
#include <nlohmann/json.hpp>

#include "attention_report.hpp"
#include "junit.hpp"
#include "lpdiag/attention/attention_spec.hpp"
#include "lpdiag/attention/probe_families.hpp"
#ifdef LPDIAG_HAVE_CUDA
#include "lpdiag/cuda/device.hpp"
#include "lpdiag/cuda/flash_attention.hpp"
#endif
#include "lpdiag/command.hpp"
#include "lpdiag/error.hpp"

namespace lpdiag::cli {
namespace {

struct ProbeArgs {
  std::vector<std::string> families;
  std::string policies;  // default fa2, unless only kernels are asked for
  std::string kernels;   // lpdiag-cuda
  std::string level = "counters";
  std::string fixes = "none";
  std::string causal = "both";
  double fail_z = 4.0;
  int seeds = 1;
  bool json = false;
  std::string junit;
};

// The kernels this build can run: lpdiag-cuda (the CUDA kernels of libdiag/cuda) when built
// with CUDA. PyTorch's backends and any callable are probed by `python3 -m lpdiag probe`.
struct KernelRow {
  std::string name;
  std::string unavailable;  // why it cannot run here; empty when it can
  AttentionConfig cfg;      // the kernels' numerics: lpdiag-cuda is fa2, lpdiag-cuda:seed[:tile=N] / :fp32 the one-thread-per-row kernels, :seed-mma[:tile=N] the tensor-core seed kernels
};

std::vector<KernelRow> parse_kernels(const std::string& text) {
  std::vector<KernelRow> out;
  std::stringstream ss(text);
  for (std::string k; std::getline(ss, k, ',');) {
    if (k.empty()) continue;
    if (k != "lpdiag-cuda" && k.rfind("lpdiag-cuda:", 0) != 0)
      throw InvalidArgument("--kernel " + k + ": this CLI probes lpdiag-cuda (fa2), lpdiag-cuda:seed[:tile=N], lpdiag-cuda:seed-mma[:tile=N] and lpdiag-cuda:fp32 only; PyTorch's "
                            "backends (sdpa-flash, sdpa-cudnn, sdpa-efficient, sdpa-math, flex) and any callable are probed by "
                            "`python3 -m lpdiag probe --kernel " + k + "`");
    KernelRow r{k, {}, {}};
    if (k != "lpdiag-cuda") {
      r.cfg = parse_policy_spec(k.substr(std::string("lpdiag-cuda:").size()));
      if (r.cfg.policy != Policy::fa2 && r.cfg.policy != Policy::seed && r.cfg.policy != Policy::seed_mma && r.cfg.policy != Policy::fp32)
        throw InvalidArgument("--kernel " + k + ": lpdiag's CUDA kernels implement fa2, seed, seed-mma and fp32");
    }
#ifdef LPDIAG_HAVE_CUDA
    if (cuda::device_count() == 0) r.unavailable = "no CUDA device visible";
#else
    r.unavailable = "this lpdiag was built without CUDA (configure with LPDIAG_WITH_CUDA=ON)";
#endif
    out.push_back(r);
  }
  return out;
}

int run_probe(const ProbeArgs& a) {
  const auto kernels = parse_kernels(a.kernels);
  const auto policies = a.policies.empty() && !kernels.empty() ? std::vector<AttentionConfig>{}
                                                               : parse_policy_list(a.policies.empty() ? "fa2" : a.policies);
  const auto fixes = parse_fix_list(a.fixes);
  std::vector<std::string> families = a.families.empty() ? probe_family_names() : a.families;
  std::vector<bool> causal_modes;
  if (a.causal == "both") causal_modes = {false, true};
  else if (a.causal == "yes") causal_modes = {true};
  else if (a.causal == "no") causal_modes = {false};
  else throw InvalidArgument("--causal must be yes, no or both");
  if (!(a.fail_z > 0)) throw InvalidArgument("--fail-z must be > 0");
  parse_level(a.level);  // --level: off, counters or full, checked before any kernel runs

  if (a.seeds < 1) throw InvalidArgument("--seeds must be >= 1");

  nlohmann::json results = nlohmann::json::array();
  std::vector<JunitCase> cases;
  int failures = 0, skipped = 0;
  if (!a.json)
    std::cout << format_table_legend() << "\n\n";
    std::cout << fmt::format("{:<13} {:<6} {:<4} ", "family", "causal", "seed") << format_table_header()
              << fmt::format(" {:>9} {:>9} {:>9}", "O |z|-ex", "δ |z|-ex", "O rms") << "\n";
  for (const auto& fam : families) {
    for (bool causal : causal_modes) {
      for (int si = 0; si < a.seeds; ++si) {
        const ProbeCase pc = make_probe_case(fam, causal, kProbeSeed + static_cast<std::uint64_t>(si));
        const AttentionInputs in{pc.q.data(), pc.k.data(), pc.v.data(), pc.dout.data(), pc.B, pc.H, pc.N, pc.d};
        const std::string lead = fmt::format("{:<13} {:<6} {:<4} ", fam, causal ? "yes" : "no", si);
        // The reference, and the exact-rounding row every other row is judged against.
        const ExactReference er = exact_reference(in, causal);
        const AttentionRun& ref = er.reference;
        const AttentionSummary& ex = er.exact;
        if (a.json) {
          nlohmann::json j = to_json(ex);
          j["family"] = fam, j["causal"] = causal, j["seed"] = si, j["failed"] = false;
          results.push_back(j);
        } else {
          std::cout << lead << format_table_row(ex) << fmt::format(" {:>9} {:>9} {:>9.3e}", "", "", ex.o_err_rms) << "\n";
        }
        auto judge = [&](const AttentionSummary& s) {
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
          cases.push_back({"lpdiag.probe", name, failed, false, why, pc.description});
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
        };
        for (AttentionConfig c : policies) {
          for (const FixConfig& f : fixes) {
            c.fix = f;
            c.causal = causal;
            judge(summarize(c, run_attention(c, in)));
          }
        }
        for (const KernelRow& k : kernels) {
          for (const FixConfig& f : fixes) {
            if (!k.unavailable.empty()) {
              const std::string name = fmt::format("{}/{}/seed{}/{}/{}", fam, causal ? "causal" : "noncausal", si, k.name, f.name());
              cases.push_back({"lpdiag.probe", name, false, true, "skipped: " + k.unavailable, pc.description});
              ++skipped;
              if (a.json)
                results.push_back({{"policy", k.name}, {"fix", f.name()}, {"family", fam}, {"causal", causal}, {"seed", si},
                                   {"skipped", k.unavailable}, {"failed", false}});
              else
                std::cout << lead << fmt::format("{:<11} {:<6} skipped: {}", k.name, f.name(), k.unavailable) << "\n";
              continue;
            }
#ifdef LPDIAG_HAVE_CUDA
            AttentionConfig c = k.cfg;
            c.fix = f;
            c.causal = causal;
            const AttentionRun run = cuda::run_attention_cuda(c, in, parse_level(a.level), false);
            AttentionSummary s = summarize_output(k.name, f.name(), output_errors(ref, run.o.data(), pc.dout.data()));
            s.fix_json = f.to_json();
            for (const auto& h : run.heads) {
              s.rows += h.rows, s.repeated_max_rows += h.repeated_max_rows;
              s.pbar_one_entries += h.pbar_one_entries, s.fix_engaged_rows += h.fix_engaged_rows;
            }
            judge(s);
#endif
          }
        }
      }
    }
  }
  if (!a.junit.empty()) write_junit(a.junit, "lpdiag probe", cases);
  if (a.json)
    std::cout << nlohmann::json{{"fail_z", a.fail_z}, {"failures", failures}, {"skipped", skipped}, {"results", results}}.dump(2)
              << "\n";
  else
    std::cout << (failures ? fmt::format("{} of {} probes FAILED (more biased than exact rounding, --fail-z {}, or NaN)\n", failures, cases.size(), a.fail_z)
                           : fmt::format("all {} probes passed (no more biased than exact rounding, --fail-z {})\n",
                                         cases.size() - static_cast<std::size_t>(skipped), a.fail_z));
  if (skipped && !a.json) std::cout << fmt::format("{} probes SKIPPED (not run, not passed): see the rows above\n", skipped);
  if (!failures && static_cast<std::size_t>(skipped) == cases.size()) {
    std::cerr << "lpdiag probe: no probe ran: every requested row was skipped (" << skipped << " rows, reasons above)\n";
    return kUnusable;
  }
  return failures ? kFinding : kOk;
}

}  // namespace

Registration register_probe(CLI::App& app) {
  auto args = std::make_shared<ProbeArgs>();
  CLI::App* sub = app.add_subcommand("probe", "CI check: flag attention numerics that round with a bias on adversarial inputs");
  sub->add_option("--family", args->families, "Families (default all): iid, sinks, dup-keys, skewed-v, large-logits, long-rows, zero-max, strong-sinks")->delimiter(',');
  sub->add_option("--seeds", args->seeds, "Seeds per family and causal mode (the fixed seed, then the next ones)")->capture_default_str();
  sub->add_option("-p,--policy", args->policies, "Comma-separated CPU policies: fa2, fa2-seq, seed, seed-mma, fp32, fp8-p, fp8-p:e5m2 (default fa2 unless --kernel is given)");
  sub->add_option("-k,--kernel", args->kernels, "Also probe real kernels: lpdiag-cuda (lpdiag's fa2 CUDA kernels, every --fix), lpdiag-cuda:seed[:tile=N] (its seed kernels), lpdiag-cuda:seed-mma[:tile=N] (its tensor-core seed kernels), lpdiag-cuda:fp32 (its fp32 kernels); PyTorch's backends: python3 -m lpdiag probe");
  sub->add_option("--level", args->level, "Instrumentation level of the kernels under test: off, counters, full")->capture_default_str();
  sub->add_option("-f,--fix", args->fixes, "Comma-separated fixes: none, paper, safe, sr (stochastic rounding of O); parameters as paper:beta=7,tol=1e-3")->capture_default_str();
  sub->add_option("--causal", args->causal, "yes, no or both")->capture_default_str();
  sub->add_option("--fail-z", args->fail_z, "Fail when |z| of the O or delta error exceeds exact rounding's |z| by more than this (and by 10%)")->capture_default_str();
  sub->add_flag("--json", args->json, "Print one JSON object on stdout");
  sub->add_option("--junit", args->junit, "Also write JUnit XML to this file");
  return {sub, [args] { return run_probe(*args); }};
}

}  // namespace lpdiag::cli
