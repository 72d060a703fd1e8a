// C4 spectral growth: sigma_1 of one W_Q head slice grows beyond the growth of the others.
//
// Every W_Q grows in healthy training, and a too-high learning rate grows them all at once. The
// link is the growth that singles out a head: log sigma_1 of each head minus the median over
// all heads (the background), fitted by a drift line plus a hinge. The head must end well above
// its pre-onset level and stand out among all heads (a robust outlier): over the whole run, or
// over the window from its own onset to the end. Heads part early in training (each finds its
// scale in the first thousand steps), so a late departure is measured against what the others
// did in the same window, not against their whole-run rises (the GPT-2-small seed-mma/none run
// of layer 2 head 7 grew 2.4x in its last 500 of 5,000 steps, while the others'
// whole-run rises spread by 0.165 in log).
#include <fmt/core.h>

#include "change_point.hpp"
#include "lpdiag/analyzers/links.hpp"
#include "series_tools.hpp"

namespace lpdiag::analysis {
namespace {

struct Series {
  std::size_t layer;
  std::int64_t head;  // -1: the whole W_Q
  std::vector<double> y;  // log sigma_1
};

std::vector<Series> log_sigmas(const BinnedTrace& t) {
  std::vector<Series> out;
  const std::int64_t heads = t.has_head_sigma ? t.heads : 1;
  for (std::size_t l = 0; l < t.layers.size(); ++l)
    for (std::int64_t h = 0; h < heads; ++h) {
      const auto sigma = head_sigma(t, l, t.has_head_sigma ? h : -1);
      std::vector<double> y(sigma.size(), tools::nan());
      for (std::size_t b = 0; b < y.size(); ++b)
        if (sigma[b] > 0 && std::isfinite(sigma[b])) y[b] = std::log(sigma[b]);
      if (tools::finite_values(y, 0, t.bins).size() >= 6) out.push_back({l, t.has_head_sigma ? h : -1, std::move(y)});
    }
  return out;
}

// Median over series at each bin (NaN where none has data).
std::vector<double> background(const std::vector<Series>& all, int K) {
  std::vector<double> bg(static_cast<std::size_t>(K), tools::nan());
  std::vector<double> v;
  for (int b = 0; b < K; ++b) {
    v.clear();
    for (const auto& s : all)
      if (std::isfinite(s.y[b])) v.push_back(s.y[b]);
    if (!v.empty()) bg[b] = tools::median(v);
  }
  return bg;
}

// Every window below counts recorded values, not bins: the weights are often recorded every 5th
// or 10th record only (`--weights-every`), and then most bins hold no sigma_1. A window of K/40
// bins at the end of such a series can hold no value at all: gen2 with the weights on every 10th
// record lost 3 of 36 planted growths so, each filling the last tenth of the trace before its
// values turned non-finite. On a series recorded in every bin a count of values is the same count
// of bins.
int finite_count(const std::vector<double>& e) { return static_cast<int>(tools::finite_values(e, 0, static_cast<int>(e.size())).size()); }

// The last `n` finite values of e[0, hi).
std::vector<double> last_values(const std::vector<double>& e, int hi, int n) {
  std::vector<double> v;
  for (int b = std::min<int>(hi, static_cast<int>(e.size())) - 1; b >= 0 && static_cast<int>(v.size()) < n; --b)
    if (std::isfinite(e[b])) v.push_back(e[b]);
  return v;
}

// The values that stand for a series' end: its last fortieth (at least 3, for a median). Growth
// that runs away just before the values turn non-finite fills only the last few percent of what
// is read; a median over the last tenth (tried earlier) halved it, and gen2 chains whose
// growth took the last 7% before NaN were missed.
double end_level(const std::vector<double>& e) {
  return tools::median(last_values(e, static_cast<int>(e.size()), std::max(3, finite_count(e) / 40)));
}

// End over start (the first fiftieth of the values: events start early in real runs).
double rise_of(const std::vector<double>& e) {
  std::vector<double> start;
  const int n_start = std::max(2, finite_count(e) / 50);
  for (double y : e)
    if (std::isfinite(y) && static_cast<int>(start.size()) < n_start) start.push_back(y);
  return end_level(e) - tools::median(start);
}

}  // namespace

std::vector<double> excess_log_sigma(const BinnedTrace& t, std::size_t layer, std::int64_t head) {
  const auto all = log_sigmas(t);
  std::vector<double> e(static_cast<std::size_t>(t.bins), tools::nan());
  const bool corrected = all.size() >= 3;
  const auto bg = corrected ? background(all, t.bins) : std::vector<double>(static_cast<std::size_t>(t.bins), 0.0);
  for (const auto& s : all)
    if (s.layer == layer && s.head == (t.has_head_sigma ? head : -1))
      for (int b = 0; b < t.bins; ++b)
        if (std::isfinite(s.y[b]) && std::isfinite(bg[b])) e[b] = s.y[b] - bg[b];
  return e;
}

double global_growth(const BinnedTrace& t) {
  const auto all = log_sigmas(t);
  if (all.empty()) return tools::nan();
  return std::exp(rise_of(background(all, t.bins)));
}

namespace {

LinkResult growth_link() {
  LinkResult r;
  r.id = "C4";
  r.name = "spectral growth of W_Q";
  return r;
}

// Every head whose growth is singled out, each as C4 would report it (present), in the order of
// the series; where there is none, `absent` says what was seen.
std::vector<LinkResult> singled_out_growths(const BinnedTrace& t, std::string& absent) {
  std::vector<LinkResult> found;
  const int K = t.bins, smooth = std::max(1, K / 200);
  const auto all = log_sigmas(t);
  if (all.empty()) {
    absent = "the trace holds no sigma_1 of attn_q matrices";
    return found;
  }
  // With fewer than three series there is no background to remove.
  const bool corrected = all.size() >= 3;
  const auto bg = corrected ? background(all, K) : std::vector<double>(static_cast<std::size_t>(K), 0.0);
  std::vector<std::vector<double>> excess, smoothed;
  std::vector<double> rises;
  for (const auto& s : all) {
    std::vector<double> e(s.y.size(), tools::nan());
    for (int b = 0; b < K; ++b)
      if (std::isfinite(s.y[b]) && std::isfinite(bg[b])) e[b] = s.y[b] - bg[b];
    smoothed.push_back(cp::running_median(e, smooth));
    rises.push_back(rise_of(smoothed.back()));
    excess.push_back(std::move(e));
  }
  // A series' level just before `tau`: the median of its last tenth of values there (at least 2).
  auto level_before = [&](const std::vector<double>& es, int tau) {
    return tools::median(last_values(es, std::max(1, tau), std::max(2, finite_count(es) / 10)));
  };
  // The first bin of the values that set that level.
  auto level_from = [&](const std::vector<double>& es, int tau, int n) {
    int b = std::max(1, tau);
    for (int seen = 0; b > 0 && seen < n;)
      if (std::isfinite(es[--b])) ++seen;
    return b;
  };
  auto change_since = [&](const std::vector<double>& es, int tau) { return end_level(es) - level_before(es, tau); };
  // Whether `growth` from `tau` on stands out among every head's change over the same window,
  // and outgrows what all heads grew in that window: a head that leads a growth every head shares
  // (a learning rate too high: the lr-0.05 runs of docs/results/validation.md, median head 10-16x over
  // 200 steps) is the "all heads alike" of the findings, not C4.
  auto stands_out_since = [&](double growth, int tau) {
    std::vector<double> d;
    for (const auto& es : smoothed)
      if (const double c = change_since(es, tau); std::isfinite(c)) d.push_back(c);
    if (d.size() < 3) return false;
    const double shared = change_since(bg, tau);
    return growth - tools::median(d) > 6 * std::max(tools::robust_sd(d), 0.05) && std::isfinite(shared) && growth > shared;
  };
  const auto finite_rises = tools::finite_values(rises, 0, static_cast<int>(rises.size()));
  const double rise_med = corrected ? tools::median(finite_rises) : 0.0;
  const double rise_sd = corrected ? std::max(tools::robust_sd(finite_rises), 0.05) : 0.0;
  const double g_all = std::exp(rise_of(bg));
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& es = smoothed[i];
    // The change holds at least a twenty-fifth of the series' values (at least 3).
    const int n_values = finite_count(es), min_post = std::max(3, n_values / 25), n_level = std::max(2, n_values / 10);
    const cp::Fit f = cp::fit_ramp(es, 2, min_post, !corrected, +1);
    if (!f.ok || !(f.change > 0)) continue;
    const double noise = cp::diff_noise_sd(excess[i]);
    const double pre = level_before(es, f.tau);
    const double growth = end_level(es) - (std::isfinite(pre) ? pre : f.a + f.s * f.tau);
    if (!(growth >= std::log(1.3) && growth > 6 * noise)) continue;
    if (corrected && !(rises[i] - rise_med > 6 * rise_sd) && !stands_out_since(growth, f.tau)) continue;  // not singled out
    LinkResult& best = found.emplace_back(growth_link());
    const double margin = std::max(3 * noise / std::sqrt(2.0 * smooth + 1), std::max(std::log(1.02), growth / 25));
    int onset = cp::walk_back_onset(es, f, margin, +1);
    // Not back past where the series sat at its level just before the change: the drift line
    // fitted to a head that rose early and then levelled off (heads part in the first thousand
    // steps) lies below that plateau, and the walk back along it would reach into the parting
    // (test_late_growth: onsets at 25-45% of the run for growth from 90%). Only where the walk
    // went back past the bins that set that level: nearer walks are the ramp's own start (on gen2
    // the clamp everywhere moved onsets later and lost a planted chain of seed 57).
    if (std::isfinite(pre) && onset < level_from(es, f.tau, n_level))
      for (int b = f.tau - 1; b >= onset; --b)
        if (std::isfinite(es[b]) && es[b] < pre + margin) {
          onset = b + 1;
          break;
        }
    const Series& s = all[i];
    std::vector<double> sigma(s.y.size(), tools::nan());
    for (std::size_t b = 0; b < sigma.size(); ++b)
      if (std::isfinite(s.y[b])) sigma[b] = std::exp(s.y[b]);
    tools::set_found(best, t, onset, t.layers[s.layer], s.head, std::exp(growth), 1.0 - std::log(1.3) / growth, sigma);
    // The head's growth relative to the median head, from its onset, said as such; the median
    // head's own growth over the run after it, named as what it is.
    const std::string head = s.head >= 0 ? fmt::format(" head {}", s.head) : std::string();
    best.evidence = corrected ? fmt::format("sigma_1 of W_Q layer {}{} grew {:.2f}x more than the median head from step {}{}", t.layers[s.layer],
                                            head, std::exp(growth), best.onset_step,
                                            std::isfinite(g_all) ? fmt::format(" (the median head itself grew {:.2f}x over the run)", g_all)
                                                                 : std::string())
                              : fmt::format("sigma_1 of W_Q layer {}{} grew {:.2f}x from step {}", t.layers[s.layer], head, std::exp(growth),
                                            best.onset_step);
  }
  if (found.empty())
    absent = corrected ? "no W_Q head whose sigma_1 grew >= 1.3x beyond the others and stood out" +
                             (std::isfinite(g_all) ? fmt::format("; the median head grew {:.2f}x over the run", g_all) : std::string())
                       : "no W_Q whose sigma_1 grew >= 1.3x and kept growing";
  return found;
}

}  // namespace

LinkResult analyze_growth(const BinnedTrace& t) {
  std::string absent;
  const auto found = singled_out_growths(t, absent);
  // The largest growth (the first of equals).
  const LinkResult* best = nullptr;
  for (const auto& g : found)
    if (!best || g.effect > best->effect) best = &g;
  if (best) return *best;
  LinkResult none = growth_link();
  none.evidence = absent;
  return none;
}

std::vector<LinkResult> growing_heads(const BinnedTrace& t, std::int64_t layer_index) {
  std::string absent;
  auto found = singled_out_growths(t, absent);
  std::erase_if(found, [&](const LinkResult& g) { return g.layer_index != layer_index; });
  return found;
}

}  // namespace lpdiag::analysis
