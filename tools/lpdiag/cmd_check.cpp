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
  bool require_data = false;
};

// The tests the gate runs that the trace holds no data for, each "test: why; how to record it".
// A test without data is not run, never "clean".
std::vector<std::string> tests_not_run(const analysis::BinnedTrace& t, const analysis::ChainResult& c) {
  std::vector<std::string> out;
  if (!c.judged)
    return {fmt::format("every test: too few records ({}; need >= {})", c.records, analysis::kMinRecords)};
  bool loss = false, rows = false, delta = false;
  for (const auto& s : t.steps) loss = loss || s.loss_n > 0;
  for (const auto& h : t.head_bins) rows = rows || h.rows > 0, delta = delta || h.d_count > 0;
  if (!loss) out.push_back("run verdict: the trace holds no loss values (mon.record(step, loss))");
  if (!rows) out.push_back("trigger: the trace holds no attention counters (run the attention through lpdiag)");
  if (!delta)
    out.push_back("biased rounding: the trace holds no delta-error statistics (Monitor(..., full_every=N) or level=\"full\"; "
                  "gpt2_train --level full)");
  if (!t.has_head_sigma) out.push_back("causal chain: the trace holds no per-head spectral norms of W_Q (the Monitor's weights cadence)");
  return out;
}

int run_check(const CheckArgs& a) {
  std::vector<JunitCase> cases;
  int findings = 0;
  bool any_not_run = false;
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
    if (c.recording_problems > 0)
      lines.push_back(fmt::format("{}:0: {} layer(s) sent attention counters the Monitor could not record (a wrong n_head, or q/k/v "
                                  "not in (B, H, N, d)): the trace cannot be judged whole",
                                  p, c.recording_problems));
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
    const std::vector<std::string> not_run = tests_not_run(t, c);
    for (const auto& n : not_run) std::cerr << fmt::format("{}: not run: {}\n", p, n);
    if (a.require_data)
      for (const auto& n : not_run) lines.push_back(fmt::format("{}:0: test not run (--require-data): {}", p, n));
    for (const auto& line : lines) std::cout << line << "\n";
    // Warnings (a plateau, logits that grew while the loss kept learning) do not fail the gate,
    // but are never unsaid: one line each on stderr.
    for (const auto& w : c.run.warnings) std::cerr << fmt::format("{}:{}: warning: {}: {}\n", p, w.onset_step, w.kind, w.evidence);
    findings += static_cast<int>(lines.size());
    std::string msg;
    for (const auto& line : lines) msg += (msg.empty() ? "" : "\n") + line;
    std::string skipped;
    for (const auto& n : not_run) skipped += (skipped.empty() ? "not run: " : "; ") + n;
    cases.push_back({"lpdiag.check", p, !lines.empty(), lines.empty() && !c.judged, lines.empty() ? skipped : msg,
                     c.findings.empty() ? "" : c.findings.back()});
    any_not_run = any_not_run || !not_run.empty();
  }
  if (!a.junit.empty()) write_junit(a.junit, "lpdiag check", cases);
  if (findings == 0)
    std::cerr << "lpdiag check: " << a.paths.size()
              << (any_not_run ? " trace(s): no finding, but some tests were not run (above; --require-data fails on that)\n"
                              : " trace(s) clean\n");
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
  sub->add_flag("--require-data", args->require_data,
                "Fail (exit 1) when a test could not run because the trace holds no data for it (e.g. no delta-error statistics)");
  return {sub, [args] { return run_check(*args); }};
}

}  // namespace lpdiag::cli
