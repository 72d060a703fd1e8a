// `lpdiag check TRACE… [--max-bias-z Z] [--max-repeated-rate R] [--junit FILE]`: the CI gate.
// Exit 0 clean, 1 a failed run, biased rounding or a chain, 2 unusable input. One `file:step: message` line
// per finding on stdout; the run verdict's warnings, which do not fail the gate, on stderr.
#include <fmt/core.h>

#include <iostream>

#include "junit.hpp"
#include "lpdiag/analyzers/chain.hpp"
#include "run_analysis.hpp"
#include "lpdiag/command.hpp"
#include "lpdiag/trace/preflight.hpp"

namespace lpdiag::cli {
namespace {

struct CheckArgs {
  std::vector<std::string> paths;
  double max_bias_z = 4.0;
  double max_repeated_rate = -1;  // < 0: not checked
  std::string junit;
};

int run_check(const CheckArgs& a) {
  std::vector<JunitCase> cases;
  int findings = 0;
  for (const auto& p : a.paths) preflight_trace(p);
  for (const auto& p : a.paths) {
    const AnalyzedRun run = analyze_run({p}, 512, a.max_bias_z, 0);
    const analysis::BinnedTrace& t = run.t;
    const analysis::ChainResult& c = run.c;
    std::vector<std::string> lines;
    if (!c.run.healthy)
      lines.push_back(fmt::format("{}:{}: run failed: {}: {}", p, c.run.failure.onset_step, c.run.failure.kind, c.run.failure.evidence));
    if (c.found)
      lines.push_back(fmt::format("{}:{}: causal chain at layer {} head {} (confidence {:.2f})", p, c.links[0].onset_step,
                                  c.layer_index, c.head, c.confidence));
    else if (c.undecided)
      lines.push_back(fmt::format("{}:{}: candidate causal chain at layer {} head {}, undecided: {}", p, c.links[0].onset_step,
                                  c.layer_index, c.head, c.decide));
    if (c.links[1].present) lines.push_back(fmt::format("{}:{}: biased rounding: {}", p, c.links[1].onset_step, c.links[1].evidence));
    if (a.max_repeated_rate >= 0) {
      for (std::size_t l = 0; l < t.layers.size(); ++l)
        for (std::int64_t h = 0; h < t.heads; ++h) {
          const auto r = analysis::repeated_rate(t, l, h);
          for (int b = 0; b < t.bins; ++b)
            if (r[b] > a.max_repeated_rate) {
              lines.push_back(fmt::format("{}:{}: repeated-max row rate {:.4f} above {} at layer {} head {}", p, t.bin_step(b), r[b],
                                          a.max_repeated_rate, t.layers[l], h));
              break;
            }
        }
    }
    for (const auto& line : lines) std::cout << line << "\n";
    // Warnings (a plateau, logits that grew while the loss kept learning) do not fail the gate,
    // but are never unsaid: one line each on stderr.
    for (const auto& w : c.run.warnings) std::cerr << fmt::format("{}:{}: warning: {}: {}\n", p, w.onset_step, w.kind, w.evidence);
    findings += static_cast<int>(lines.size());
    std::string msg;
    for (const auto& line : lines) msg += (msg.empty() ? "" : "\n") + line;
    cases.push_back({"lpdiag.check", p, !lines.empty(), false, msg, c.findings.empty() ? "" : c.findings.back()});
  }
  if (!a.junit.empty()) write_junit(a.junit, "lpdiag check", cases);
  if (findings == 0) std::cerr << "lpdiag check: " << a.paths.size() << " trace(s) clean\n";
  return findings ? kFinding : kOk;
}

}  // namespace

Registration register_check(CLI::App& app) {
  auto args = std::make_shared<CheckArgs>();
  CLI::App* sub = app.add_subcommand("check", "CI gate: exit 1 when a run failed or a trace shows biased rounding or a causal chain");
  sub->add_option("traces", args->paths, "Trace files (each checked on its own)")->required();
  sub->add_option("--max-bias-z", args->max_bias_z, "|z| of the delta-error mean above which rounding counts as biased")->capture_default_str();
  sub->add_option("--max-repeated-rate", args->max_repeated_rate, "Also flag a repeated-max row rate above this (0..1)");
  sub->add_option("--junit", args->junit, "Also write JUnit XML to this file");
  return {sub, [args] { return run_check(*args); }};
}

}  // namespace lpdiag::cli
