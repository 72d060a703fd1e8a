// `lpdiag analyze TRACE… [--reference REF…] [--json]`: the run verdict, the causal chain or
// which link is missing, and, against a counterfactual reference run, whether the failure is
// attributable to the attention numerics. Several files are the rank files of one run.
#include <fmt/core.h>

#include <iostream>

#include "chain_json.hpp"
#include "lpdiag/command.hpp"
#include "progress.hpp"
#include "run_analysis.hpp"

namespace lpdiag::cli {
namespace {

struct AnalyzeArgs {
  std::vector<std::string> paths, reference;
  bool json = false;
  int bins = 512;
  double bias_z = 4.0;
  int workers = 0;
};

void print_run(const analysis::BinnedTrace& t, const analysis::ChainResult& c) {
  std::cout << fmt::format("{} ({} file{}, {} records, steps {}..{})\n", t.files.front(), t.files.size(),
                           t.files.size() > 1 ? "s" : "", t.records, t.first_step, t.last_step);
  if (c.run.healthy) std::cout << (c.run.warnings.empty() ? "RUN HEALTHY\n" : "RUN HEALTHY, with a warning\n");
  else std::cout << fmt::format("RUN FAILED: {} from step {}\n  {}\n", c.run.failure.kind, c.run.failure.onset_step, c.run.failure.evidence);
  for (const auto& w : c.run.warnings) std::cout << fmt::format("  warning: {} from step {}: {}\n", w.kind, w.onset_step, w.evidence);
  if (c.found)
    std::cout << fmt::format("CAUSAL CHAIN at layer {}, head {} (confidence {:.2f}{})\n", c.layer_index, c.head, c.confidence,
                             c.driving == "reference" ? "; decided by the reference run" : "");
  else if (c.undecided)
    std::cout << fmt::format("CANDIDATE CHAIN at layer {}, head {}: undecided (the trace cannot show that the bias drives the growth)\n",
                             c.layer_index, c.head);
  else
    std::cout << "no causal chain\n";
  for (const auto& l : c.links) {
    if (l.present)
      std::cout << fmt::format("  {} {:<30} step {:>9}  conf {:.2f}  {}\n", l.id, l.name, l.onset_step, l.confidence, l.evidence);
    else
      std::cout << fmt::format("  {} {:<30} {:>14}  {}\n", l.id, l.name, "MISSING", l.evidence);
  }
  if (c.correlation.computed)
    std::cout << fmt::format("  bias -> growth: lag {} bins, r {:.2f}, p {:.2g}\n", c.correlation.lag_bins, c.correlation.r, c.correlation.p);
  std::cout << "findings:\n";
  for (const auto& f : c.findings) std::cout << "  - " << f << "\n";
}

int run_analyze(const AnalyzeArgs& a) {
  ProgressBar bar("reading");
  AnalyzedRun run = analyze_run(a.paths, a.bins, a.bias_z, a.workers, [&](double f) { bar(f); });
  std::optional<AnalyzedRun> ref;
  std::optional<analysis::ReferenceComparison> cmp;
  if (!a.reference.empty()) {
    ProgressBar rbar("reading the reference");
    ref = analyze_run(a.reference, a.bins, a.bias_z, a.workers, [&](double f) { rbar(f); });
    cmp = compare_runs(run, a.reference.front(), *ref);
    analysis::settle_with_reference(run.c, *cmp);
  }
  if (a.json) {
    nlohmann::json j = chain_to_json(run.t, run.c);
    j["attention_numerics"] = {{"policy", run.numerics.policy},
                               {"fix", run.numerics.fix},
                               {"all_fp32", run.numerics.all_fp32},
                               {"all_external", run.numerics.all_external}};
    if (cmp) {
      j["reference"] = reference_to_json(*cmp);
      j["reference"]["run"] = verdict_to_json(ref->c.run);
    }
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  print_run(run.t, run.c);
  if (cmp) {
    const char* verdict = !cmp->attributable ? "UNDECIDED" : *cmp->attributable ? "YES" : "NO";
    std::cout << fmt::format("reference {}: {}\nattributable to the attention numerics: {}\n  {}\n", cmp->path,
                             ref->c.run.healthy ? "healthy" : "failed: " + ref->c.run.failure.kind + " from step " +
                                                                  std::to_string(ref->c.run.failure.onset_step),
                             verdict, cmp->evidence);
  }
  return kOk;
}

}  // namespace

Registration register_analyze(CLI::App& app) {
  auto args = std::make_shared<AnalyzeArgs>();
  CLI::App* sub = app.add_subcommand(
      "analyze", "Judge the run (healthy or failed, how, when) and rebuild the causal chain (trigger -> bias -> aligned updates -> "
                 "spectral growth -> failure)");
  sub->add_option("traces", args->paths, "Trace files (several = the rank files of one run)")->required();
  sub->add_option("--reference", args->reference,
                  "Counterfactual run of the same config and seed with other attention numerics (fp32 attention, PyTorch's own, the "
                  "fix): says whether the failure is attributable to the attention numerics")
      ->expected(1, 64);
  sub->add_flag("--json", args->json, "Print one JSON object on stdout");
  sub->add_option("--bins", args->bins, "Time resolution: number of bins the run is reduced to")->capture_default_str()->check(CLI::Range(8, 100000));
  sub->add_option("--bias-z", args->bias_z, "|z| a delta-error mean must reach to count as biased rounding")->capture_default_str();
  sub->add_option("--workers", args->workers,
                  "Processes reading the trace in parallel (0: one below 2^18 records, else 16)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  return {sub, [args] { return run_analyze(*args); }};
}

}  // namespace lpdiag::cli
