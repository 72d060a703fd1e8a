// `lpdiag analyze TRACE… [--reference REF…] [--json]`: the run verdict, the causal chain or
// which link is missing, and, against a counterfactual reference run, whether the failure is
// attributable to the attention numerics. Several files are the rank files of one run.
#include <fmt/core.h>

#include <iostream>

#include "chain_json.hpp"
#include "lpdiag/command.hpp"
#include "progress.hpp"
#include "run_analysis.hpp"
#include "guard_outcome.hpp"
#include "verdict_summary.hpp"

namespace lpdiag::cli {
namespace {

struct AnalyzeArgs {
  std::vector<std::string> paths, reference;
  bool json = false, verbose = false;
  int bins = 512;
  double bias_z = 4.0;
  int workers = 0;
};

// The answer first (verdict_summary), then one line per link; the evidence of each link, the
// findings and the reference's reasoning with --verbose.
void print_run(const AnalyzedRun& run, const std::optional<analysis::ReferenceComparison>& cmp, bool verbose) {
  const analysis::BinnedTrace& t = run.t;
  const analysis::ChainResult& c = run.c;
  std::cout << fmt::format("{} ({} file{}, {} records, steps {}..{})\n", t.files.front(), t.files.size(),
                           t.files.size() > 1 ? "s" : "", t.records, t.first_step, t.last_step);
  const auto g = guard_outcome(run);
  for (const auto& line : verdict_summary(c, run.numerics, cmp, g)) std::cout << line << "\n";
  for (const auto& line : alarm_lines(run)) std::cout << line << "\n";
  if (g) std::cout << guard_outcome_line(*g) << "\n";
  if (!c.judged) return;
  std::cout << "\nlinks:\n";
  for (const auto& line : link_table(c)) std::cout << line << "\n";
  if (!verbose) {
    std::cout << "(the evidence of each link and every finding: --verbose)\n";
    return;
  }
  std::cout << "\nevidence:\n";
  for (const auto& l : c.links) std::cout << fmt::format("  {}: {}\n", l.id, l.evidence);
  if (c.correlation.computed)
    std::cout << fmt::format("  bias -> growth: lag {} bins, r {:.2f}, p {:.2g}\n", c.correlation.lag_bins, c.correlation.r, c.correlation.p);
  std::cout << "findings:\n";
  // The links' own sentences were printed above; the findings add the rest.
  for (const auto& f : c.findings) {
    bool is_link = false;
    for (const auto& l : c.links) is_link = is_link || f.rfind(l.id + " " + l.name, 0) == 0;
    if (!is_link) std::cout << "  - " << f << "\n";
  }
  if (cmp) std::cout << fmt::format("reference {}:\n  {}\n", cmp->path, cmp->evidence);
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
                               {"all_external", run.numerics.all_external},
                               {"observed", run.numerics.observed},
                               {"observe_every", run.numerics.observe_every},
                               {"observed_kernels", run.numerics.observed_kernels}};
    if (cmp) {
      j["reference"] = reference_to_json(*cmp);
      j["reference"]["run"] = verdict_to_json(ref->c.run);
    }
    const auto g = guard_outcome(run);
    j["summary"] = verdict_summary(run.c, run.numerics, cmp, g);
    j["alarms"] = nlohmann::json::array();
    j["guard_switches"] = nlohmann::json::array();
    for (const auto& e : run.alarm_events) {
      nlohmann::json o = {{"step", e.step}, {"layer_index", e.layer_index >= 0 ? nlohmann::json(e.layer_index) : nlohmann::json()},
                          {"head", e.head >= 0 ? nlohmann::json(e.head) : nlohmann::json()}, {"message", e.message}};
      if (e.kind != "alarm") o["switched"] = e.kind != "guard_failed";  // a guard's event: whether the layer switched
      (e.kind == "alarm" ? j["alarms"] : j["guard_switches"]).push_back(std::move(o));
    }
    j["guard_outcome"] = g ? guard_outcome_json(*g) : nlohmann::json(nullptr);
    const auto th = live_alarm_thresholds(run);
    j["alarm_thresholds"] = th ? nlohmann::json(*th) : nlohmann::json(nullptr);
    std::cout << j.dump(2) << "\n";
    return verdict_exit_code(run.c);
  }
  print_run(run, cmp, a.verbose);
  return verdict_exit_code(run.c);
}

}  // namespace

Registration register_analyze(CLI::App& app) {
  auto args = std::make_shared<AnalyzeArgs>();
  CLI::App* sub = app.add_subcommand(
      "analyze", "Judge the run (healthy or failed, how, when) and rebuild the causal chain (trigger -> bias -> aligned updates -> "
                 "spectral growth -> failure). Exit 0: healthy, no chain; 1: the run failed or a chain or candidate is named; 2: "
                 "unusable input");
  sub->add_option("traces", args->paths, "Trace files (several = the rank files of one run)")->required();
  sub->add_option("--reference", args->reference,
                  "Counterfactual run of the same config and seed with other attention numerics (fp32 attention, PyTorch's own, the "
                  "fix): says whether the failure is attributable to the attention numerics")
      ->expected(1, 64);
  sub->add_flag("--json", args->json, "Print one JSON object on stdout");
  sub->add_flag("-v,--verbose", args->verbose, "Also print the evidence of each link, every finding and the reference's reasoning");
  sub->add_option("--bins", args->bins, "Time resolution: number of bins the run is reduced to")->capture_default_str()->check(CLI::Range(8, 100000));
  sub->add_option("--bias-z", args->bias_z, "|z| a delta-error mean must reach to count as biased rounding")->capture_default_str();
  sub->add_option("--workers", args->workers,
                  "Processes reading the trace in parallel (0: one below 2^18 records, else 16)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  return {sub, [args] { return run_analyze(*args); }};
}

}  // namespace lpdiag::cli
