// `lpdiag report TRACE… [--reference REF…] -o report.html`: one self-contained HTML file (inline
// SVG, no network): the run verdict first, the evidence of every link, the chain timeline, and
// with a reference run its loss and max logit overlaid.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "chain_json.hpp"
#include "lpdiag/analyzers/chain.hpp"
#include "run_analysis.hpp"
#include "lpdiag/command.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/trace/preflight.hpp"
#include "progress.hpp"
#include "svg_plot.hpp"
#include "guard_outcome.hpp"
#include "verdict_summary.hpp"

namespace lpdiag::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> paths, reference;
  std::string out = "report.html";
  std::int64_t layer = -1, head = -1;  // < 0: the flagged place
  bool overwrite = false;
};

const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// `y` of another run's bins at the steps `x` (nearest bin by step); NaN outside its range.
std::vector<double> resample(const analysis::BinnedTrace& from, const std::vector<double>& y, const std::vector<double>& x) {
  std::vector<double> out(x.size(), NAN);
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] < double(from.first_step) || x[i] > double(from.last_step)) continue;
    const int b = std::min(from.bins - 1, std::max(0, static_cast<int>((x[i] - double(from.first_step)) / from.bin_width)));
    out[i] = y[static_cast<std::size_t>(b)];
  }
  return out;
}

int run_report(const ReportArgs& a) {
  ProgressBar bar("reading");
  AnalyzedRun run = analyze_run(a.paths, 512, 4.0, 0, [&](double f) { bar(f); }, /*o_error=*/true);
  const analysis::BinnedTrace& t = run.t;
  const analysis::ChainResult& c = run.c;
  std::optional<AnalyzedRun> ref;
  std::optional<analysis::ReferenceComparison> cmp;
  if (!a.reference.empty()) {
    ref = analyze_run(a.reference, 512, 4.0, 0);
    cmp = compare_runs(run, a.reference.front(), *ref);
    analysis::settle_with_reference(run.c, *cmp);
  }
  if (t.layers.empty()) throw InputError(a.paths.front() + ": the trace has no attention layers to report on");
  {
    std::error_code ec;
    if (std::filesystem::is_directory(a.out, ec)) throw InputError(a.out + ": is a directory; give the report a file name (-o report.html)");
    if (!a.overwrite && std::filesystem::exists(a.out, ec))
      throw InputError(a.out + ": already exists and was left untouched; pass --overwrite to replace it, or -o another file");
  }

  // The flagged place: the chain's, else the strongest localized link's, else layer 0 head 0.
  std::int64_t layer = t.layers.front(), head = 0;
  if (c.found || c.undecided) layer = c.layer_index, head = c.head;
  else
    for (int k : {1, 0, 3})
      if (c.links[k].present && c.links[k].layer_index >= 0) {
        layer = c.links[k].layer_index, head = std::max<std::int64_t>(0, c.links[k].head);
        break;
      }
  if (a.layer >= 0) {
    if (std::find(t.layers.begin(), t.layers.end(), a.layer) == t.layers.end())
      throw InputError(fmt::format("--layer {}: the trace has attention layers {}..{}", a.layer, t.layers.front(), t.layers.back()));
    layer = a.layer;
  }
  if (a.head >= 0) {
    if (a.head >= t.heads) throw InputError(fmt::format("--head {}: the trace's layers have {} heads (0..{})", a.head, t.heads, t.heads - 1));
    head = a.head;
  }
  const std::size_t slot = t.layer_slot(layer);

  std::vector<double> x(static_cast<std::size_t>(t.bins));
  for (int b = 0; b < t.bins; ++b) x[b] = double(t.bin_step(b));
  std::vector<PlotMarker> marks;
  for (const auto& l : c.links)
    if (l.present) marks.push_back({l.onset_step, l.id});

  std::vector<Plot> plots;
  {
    Plot p{"Loss", "loss", x, {{"loss", analysis::loss_series(t), kColors[0]}}, marks};
    if (ref) p.series.push_back({"reference loss", resample(ref->t, analysis::loss_series(ref->t), x), kColors[1]});
    plots.push_back(p);
  }
  if (c.run.max_logit >= 0 || (ref && ref->c.run.max_logit >= 0)) {
    Plot p{"Max attention logit (all layers and heads)", "logit", x, {{"max logit", c.run.logit_series, kColors[3]}}, marks, true};
    if (ref) p.series.push_back({"reference max logit", resample(ref->t, ref->c.run.logit_series, x), kColors[1]});
    plots.push_back(p);
  }
  {
    Plot p{fmt::format("σ₁(W_Q) per head, layer {}", layer), "σ₁", x, {}, marks, true};
    for (std::int64_t h = 0; h < t.heads; ++h)
      p.series.push_back({fmt::format("head {}{}", h, h == head ? " *" : ""), analysis::head_sigma(t, slot, t.has_head_sigma ? h : -1),
                          kColors[h % 10]});
    plots.push_back(p);
  }
  {
    Plot p{fmt::format("Repeated-max row rate, layer {}", layer), "rate", x, {}, marks};
    for (std::int64_t h = 0; h < t.heads; ++h)
      p.series.push_back({fmt::format("head {}{}", h, h == head ? " *" : ""), analysis::repeated_rate(t, slot, h), kColors[h % 10]});
    plots.push_back(p);
  }
  plots.push_back({fmt::format("Error bias z per bin, layer {} head {}", layer, head), "z", x,
                   {{"δ error z", analysis::delta_z(t, slot, head), kColors[3]}, {"O error z", analysis::o_z(t, slot, head), kColors[0]}},
                   marks});
  {
    // NaN in the bins without delta-error records: a trace without any says "no data", never a flat 0.
    std::vector<double> d(static_cast<std::size_t>(t.bins), NAN);
    double total = 0;
    for (int b = 0; b < t.bins; ++b)
      if (t.at(slot, head, b).d_count > 0) d[b] = total += t.at(slot, head, b).d_sum;
    plots.push_back({fmt::format("Running driver D = Σ(δ_lp − δ_hp), layer {} head {}", layer, head), "D", x, {{"D", d, kColors[4]}}, marks});
  }
  {
    std::vector<double> sim(static_cast<std::size_t>(t.bins), NAN), conc(static_cast<std::size_t>(t.bins), NAN);
    for (int b = 0; b < t.bins; ++b) {
      const auto& lb = t.layer_at(slot, b);
      if (lb.sim_n > 0) sim[b] = lb.sim_sum / lb.sim_n;
      if (lb.conc_n > 0) conc[b] = lb.conc_sum / lb.conc_n;
    }
    plots.push_back({fmt::format("W_Q update: top-pair similarity and concentration, layer {}", layer), "0..1", x,
                     {{"similarity", sim, kColors[2]}, {"concentration", conc, kColors[1]}}, marks});
  }

  std::string html = "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>lpdiag report</title><style>"
                     "body{font-family:sans-serif;margin:24px;max-width:920px}td,th{padding:2px 8px;text-align:left;font-size:13px}"
                     ".found{color:#c00}.none{color:#070}.open{color:#555}.timeline{position:relative;height:46px;border:1px solid #999;margin:8px 0}"
                     ".tick{position:absolute;top:0;height:46px;border-left:2px solid #c00;font-size:11px;padding-left:3px}</style></head><body>";
  html += "<h1>lpdiag report</h1><p>" + html_escape(fmt::format("{} ({} file(s), {} records, steps {}..{})", t.files.front(), t.files.size(),
                                                               t.records, t.first_step, t.last_step)) + "</p>";
  if (run.numerics.known)
    html += "<p>" + html_escape(fmt::format("attention as recorded: policy {}, fix {}{}", run.numerics.policy, run.numerics.fix,
                                            run.numerics.observed
                                                ? fmt::format(" (observed from outside the kernel{}: repeated maxima, O and delta errors)",
                                                              run.numerics.observe_every > 0
                                                                  ? fmt::format(" every {} steps", run.numerics.observe_every)
                                                                  : "")
                                            : run.numerics.all_external ? " (a kernel lpdiag did not run: no counters or error statistics)"
                                                                        : "")) +
            "</p>";
  // The headline is the run verdict: a failed run is never shown green, nor a healthy one with a
  // warning (a loss plateau, logits that kept growing): that one is grey and says so.
  // A loss rising at the trace's end: healthy only until the turn, as analyze's headline says.
  html += loss_rising_at_end(c) ? fmt::format("<h2 class=\"open\">Run healthy until step {}: the loss was rising when the trace ended</h2>",
                                      c.run.warnings.front().onset_step)
          : c.run.healthy ? (c.run.warnings.empty() ? std::string("<h2 class=\"none\">Run healthy</h2>")
                                                  : std::string("<h2 class=\"open\">Run healthy by the failure rules, with a warning</h2>"))
                        : fmt::format("<h2 class=\"found\">Run FAILED: {} from step {}</h2><p>{}</p>", html_escape(c.run.failure.kind),
                                      c.run.failure.onset_step, html_escape(c.run.failure.evidence));
  // Each alarm line's first word in bold ("alarm", "guard"); the thresholds line's label whole; the
  // pointer to a cut alarm's whole evidence, "(...)", plain.
  for (const auto& line : alarm_lines(run)) {
    if (line.rfind("(", 0) == 0) {
      html += "<p class=\"open\">" + html_escape(line) + "</p>";
      continue;
    }
    const auto cut = line.rfind("live alarm thresholds:", 0) == 0 ? line.find(':') : line.find(' ');
    html += "<p class=\"open\"><b>" + html_escape(line.substr(0, cut)) + "</b>" + html_escape(line.substr(cut)) + "</p>";
  }
  if (const auto g = guard_outcome(run)) html += "<p class=\"open\"><b>guard</b>" + html_escape(guard_outcome_line(*g).substr(5)) + "</p>";
  for (const auto& w : c.run.warnings)
    html += fmt::format("<p class=\"open\"><b>Warning</b>: {} from step {}: {}</p>", html_escape(w.kind), w.onset_step, html_escape(w.evidence));
  html += c.found       ? fmt::format("<h3 class=\"found\">Causal chain at layer {}, head {} (confidence {:.2f}{})</h3>", c.layer_index, c.head,
                                      c.confidence, c.driving == "reference" ? "; decided by the reference run" : "")
          : c.undecided ? fmt::format("<h3 class=\"open\">Candidate causal chain at layer {}, head {}: undecided</h3><p>{}</p>", c.layer_index,
                                      c.head,
                                      html_escape((c.untested.empty() ? std::string("the trace cannot show that the bias drives the growth; ")
                                                                      : "every link is present but " + analysis::untested_link_text(c) + "; ") +
                                                  c.decide))
                  : std::string(c.run.healthy ? "<h3 class=\"none\">No causal chain</h3>"
                                              : "<h3 class=\"open\">No causal chain established for this failure</h3>");
  if (cmp)
    html += fmt::format("<p><b>Reference</b> {}: attributable to the attention numerics: <b>{}</b>. {}</p>", html_escape(cmp->path),
                        !cmp->attributable ? "undecided" : *cmp->attributable ? "yes" : "no", html_escape(cmp->evidence));
  html += "<table><tr><th>link</th><th>onset step</th><th>confidence</th><th>evidence</th></tr>";
  for (const auto& l : c.links)
    html += fmt::format("<tr><td>{} {}</td><td>{}</td><td>{}</td><td>{}</td></tr>", l.id, html_escape(l.name),
                        l.present ? std::to_string(l.onset_step) : "missing", l.present ? fmt::format("{:.2f}", l.confidence) : "",
                        html_escape(l.evidence));
  html += "</table><ul>";
  for (const auto& f : c.findings) html += "<li>" + html_escape(f) + "</li>";
  html += "</ul><h3>Chain timeline</h3>";
  bool any_link = false;
  for (const auto& l : c.links) any_link = any_link || l.present;
  if (!any_link) {
    html += "<p class=\"open\" id=\"timeline\">No link of the chain was found in this trace, so there is no timeline to draw.</p>";
  } else {
    html += fmt::format("<div class=\"timeline\" id=\"timeline\" title=\"steps {}..{}\">", t.first_step, t.last_step);
    const double span = std::max<double>(1, double(t.last_step - t.first_step));
    for (const auto& l : c.links)
      if (l.present)
        html += fmt::format("<div class=\"tick\" style=\"left:{:.1f}%\">{}<br>{}</div>", 100.0 * double(l.onset_step - t.first_step) / span,
                            l.id, l.onset_step);
    html += fmt::format("</div><p style=\"font-size:11px;color:#777\">steps {} (left) to {} (right)</p>", t.first_step, t.last_step);
  }
  for (const auto& p : plots) html += "<div>" + render_svg(p) + "</div>";
  html += fmt::format("<p style=\"font-size:11px;color:#777\">{} plots. Dashed red lines: link onsets. * marks the flagged head.</p>", plots.size());
  html += "</body></html>\n";
  std::ofstream f(a.out);
  if (!f) throw WriteError(a.out + ": cannot write the report");
  f << html;
  if (!f) throw WriteError(a.out + ": writing the report failed");
  std::cerr << "wrote " << a.out << "\n";
  return kOk;
}

}  // namespace

Registration register_report(CLI::App& app) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* sub = app.add_subcommand("report", "Write a self-contained HTML report with SVG plots of every link");
  sub->add_option("traces", args->paths, "Trace files (several = the rank files of one run)")->required();
  sub->add_option("-o,--output", args->out, "Output HTML file")->capture_default_str();
  sub->add_option("--reference", args->reference, "Counterfactual run to compare with and overlay")->expected(1, 64);
  sub->add_option("--layer", args->layer, "Attention layer of the per-head plots (default: the chain's, else the strongest link's)");
  sub->add_option("--head", args->head, "Head of the per-head plots (default: the chain's, else the strongest link's)");
  sub->add_flag("--overwrite", args->overwrite, "Replace an existing output file (without it, an existing file is refused)");
  return {sub, [args] { return run_report(*args); }};
}

}  // namespace lpdiag::cli
