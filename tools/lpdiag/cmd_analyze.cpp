// `lpdiag analyze TRACE… [--json]`: the causal chain, or which link is missing. Several files
// are the rank files of one run.
#include <fmt/core.h>

#include <iostream>

#include "chain_json.hpp"
#include "lpdiag/analyzers/chain.hpp"
#include "lpdiag/command.hpp"
#include "lpdiag/trace/preflight.hpp"
#include "progress.hpp"

namespace lpdiag::cli {
namespace {

struct AnalyzeArgs {
  std::vector<std::string> paths;
  bool json = false;
  int bins = 512;
  double bias_z = 4.0;
  int workers = 0;
};

void print_chain(const analysis::BinnedTrace& t, const analysis::ChainResult& c) {
  std::cout << fmt::format("{} ({} file{}, {} records, steps {}..{})\n", t.files.front(), t.files.size(),
                           t.files.size() > 1 ? "s" : "", t.records, t.first_step, t.last_step);
  if (c.found)
    std::cout << fmt::format("CAUSAL CHAIN at layer {}, head {} (confidence {:.2f})\n", c.layer_index, c.head, c.confidence);
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
  for (const auto& p : a.paths) preflight_trace(p);
  ProgressBar bar("reading");
  const analysis::BinnedTrace t = analysis::bin_traces(a.paths, a.bins, [&](double f) { bar(f); }, a.workers);
  const analysis::ChainResult c = analysis::reconstruct_chain(t, a.bias_z);
  if (a.json) std::cout << chain_to_json(t, c).dump(2) << "\n";
  else print_chain(t, c);
  return kOk;
}

}  // namespace

Registration register_analyze(CLI::App& app) {
  auto args = std::make_shared<AnalyzeArgs>();
  CLI::App* sub = app.add_subcommand("analyze", "Rebuild the causal chain (trigger -> bias -> aligned updates -> spectral growth -> loss explosion)");
  sub->add_option("traces", args->paths, "Trace files (several = the rank files of one run)")->required();
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
