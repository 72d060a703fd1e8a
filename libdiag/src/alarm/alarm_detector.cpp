// The online alarm's detector (alarm_detector.hpp). Histories are kept per (layer, head) for the
// last two windows only, so memory does not grow with the run.
#include "lpdiag/alarm/alarm_detector.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <tuple>

namespace lpdiag::alarm {

AlarmParams AlarmParams::frozen() {
  // Fitted by tests/analyzers/alarm_lead_time.cpp on the trace corpus, leave one run out; these are
  // the values fitted on every run (docs/results/alarm.md). Windows and the collapse and loss
  // levels are not fitted: the collapse rule is the verdict's (a one-hot softmax at a logit of
  // 100, where the bf16 spacing is 0.5, reached 30x above where it was), the loss rule a doubling.
  // The first fit (0.35 / 1.5 / 0.1, on 27 runs) raised false alarms on 2 of 5 healthy runs
  // made after it; these are the fit on all 36 runs, the runs that tested it included.
  AlarmParams p;
  p.window = 500;
  p.settled_growth = 0.15;
  p.excess_growth = 0.25;
  p.trigger_ratio = 2.0;
  p.trigger_rise = 0.02;
  return p;
}

std::optional<AlarmParams> AlarmParams::preset(std::string_view name) {
  if (name == "default") return frozen();
  if (name == "slow-trigger") {
    // The first fit, frozen before any of the runs that later tested both sets was made
    // (docs/results/alarm.md compares the two on them, and gives the rule that decides which one
    // is the default).
    AlarmParams p = frozen();
    p.excess_growth = 0.35;
    p.trigger_ratio = 1.5;
    p.settled_growth = 0.1;
    return p;
  }
  if (name == "odds-trigger") {
    // The default's thresholds with the trigger's rise measured in odds: set after the default
    // missed three late failures whose failing head's repeated maxima were already common (21-37%
    // of rows in the window before) and rose less than 2x a window; frozen before any run that
    // tests it was made
    // (docs/results/alarm.md).
    AlarmParams p = frozen();
    p.trigger_odds = true;
    return p;
  }
  return std::nullopt;
}

std::vector<std::string> alarm_preset_names() { return {std::begin(kAlarmPresets), std::end(kAlarmPresets)}; }

std::string alarm_preset_list() {
  std::string out;
  for (const char* n : kAlarmPresets) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2) return *mid;
  return 0.5 * (*mid + *std::max_element(v.begin(), mid));
}

template <class D>
void drop_before(D& d, std::int64_t step) {
  while (!d.empty() && d.front().step < step) d.pop_front();
}

}  // namespace

AlarmDetector::AlarmDetector(AlarmParams p) : p_(p) {}

AlarmDetector::HeadHistory& AlarmDetector::history(std::int64_t layer, std::int64_t head) {
  return hist_[static_cast<std::size_t>(layer) * static_cast<std::size_t>(heads_) + static_cast<std::size_t>(head)];
}

bool AlarmDetector::layer_alarmed(std::int64_t layer_index, std::string_view kind) const {
  return std::any_of(alarms_.begin(), alarms_.end(), [&](const Alarm& a) { return a.layer_index == layer_index && a.kind == kind; });
}

void AlarmDetector::raise(Alarm a, std::vector<Alarm>& out) {
  alarms_.push_back(a);
  out.push_back(std::move(a));
}

std::vector<Alarm> AlarmDetector::feed(const AlarmRecord& r) {
  std::vector<Alarm> out;
  if (r.step <= last_step_) return out;
  last_step_ = r.step;
  if (r.layers != layers_ || r.heads != heads_) {  // the first record, or a layout that changed
    layers_ = r.layers;
    heads_ = r.heads;
    hist_.assign(layers_.size() * static_cast<std::size_t>(std::max<std::int64_t>(heads_, 0)), {});
    readings_.layers.assign(layers_.size(), LayerReading{});
    for (std::size_t l = 0; l < layers_.size(); ++l) readings_.layers[l].layer_index = layers_[l];
  }
  readings_.step = r.step;
  const auto keep_from = r.step - static_cast<std::int64_t>(2 * p_.window) - 1;
  for (std::size_t l = 0; l < layers_.size(); ++l)
    for (std::int64_t h = 0; h < heads_; ++h) {
      auto& hh = history(static_cast<std::int64_t>(l), h);
      const auto& s = r.at(l, h);
      if (s.sigma > 0 && std::isfinite(s.sigma)) hh.sigma.push_back({r.step, s.sigma});
      if (s.rows > 0 && s.repeated >= 0) hh.counts.push_back({r.step, s.rows, s.repeated});
      drop_before(hh.sigma, keep_from);
      drop_before(hh.counts, keep_from);
    }
  check_loss(r, out);
  check_collapse(r, out);
  check_growth(r, out);
  for (std::size_t l = 0; l < layers_.size(); ++l) {  // after the check: the window excludes this record
    double top = kUnmeasured;
    for (std::int64_t h = 0; h < heads_; ++h) {
      auto& hh = history(static_cast<std::int64_t>(l), h);
      const double x = r.at(l, h).logit_max;
      if (!std::isnan(x)) hh.logit.push_back({r.step, x}), top = std::isnan(top) ? x : std::max(top, x);
      drop_before(hh.logit, r.step - static_cast<std::int64_t>(p_.collapse_window));
    }
    if (!std::isnan(top)) readings_.layers[l].logit_max = top;
  }
  return out;
}

void AlarmDetector::check_loss(const AlarmRecord& r, std::vector<Alarm>& out) {
  if (!nonfinite_raised_ && (r.nonfinite_event || std::isinf(r.loss))) {
    nonfinite_raised_ = true;
    raise({r.step, "non_finite", -1, -1,
           r.nonfinite_event ? fmt::format("a non-finite value at step {} (nan_inf event)", r.step)
                             : fmt::format("the loss is {} at step {}", r.loss, r.step)},
          out);
    return;
  }
  if (!std::isfinite(r.loss)) return;
  recent_loss_.push_back(r.loss);
  if (recent_loss_.size() > 5) recent_loss_.pop_front();
  if (recent_loss_.size() < 3) return;
  const double m = median({recent_loss_.begin(), recent_loss_.end()});
  if (!loss_raised_ && std::isfinite(best_loss_median_) && best_loss_median_ > 0 && m >= p_.loss_factor * best_loss_median_) {
    loss_raised_ = true;
    raise({r.step, "loss_explosion", -1, -1,
           fmt::format("the loss's running median reached {:.4g} at step {}, {:.1f}x its best ({:.4g})", m, r.step,
                       m / best_loss_median_, best_loss_median_)},
          out);
  }
  best_loss_median_ = std::min(best_loss_median_, m);
  if (best_loss_median_ > 0) readings_.loss_over_best = m / best_loss_median_;
}

std::pair<double, double> AlarmDetector::repeated_rates(std::int64_t layer, std::int64_t head, std::int64_t step) {
  const auto W = static_cast<std::int64_t>(p_.window);
  double rr = 0, rp = 0, br = 0, bp = 0;
  for (const auto& c : history(layer, head).counts) {
    if (c.step > step - W) rr += c.rows, rp += c.repeated;
    else if (c.step > step - 2 * W) br += c.rows, bp += c.repeated;
  }
  return {rr > 0 ? rp / rr : kUnmeasured, br > 0 ? bp / br : kUnmeasured};
}

bool AlarmDetector::rose(double recent, double before) const {
  if (!p_.trigger_odds) return recent >= p_.trigger_ratio * before;
  if (recent >= 1) return true;  // infinite odds (the rise itself is checked apart)
  if (before >= 1) return false;
  return recent / (1 - recent) >= p_.trigger_ratio * (before / (1 - before));
}

void AlarmDetector::check_collapse(const AlarmRecord& r, std::vector<Alarm>& out) {
  std::int64_t best_l = -1, best_h = -1;
  double best_x = 0, best_low = 0;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    if (layer_alarmed(layers_[l], "logit_collapse")) continue;
    for (std::int64_t h = 0; h < heads_; ++h) {
      const double x = r.at(l, h).logit_max;
      if (std::isnan(x) || !(x >= p_.collapse_level)) continue;
      const auto& lg = history(static_cast<std::int64_t>(l), h).logit;
      double low = std::numeric_limits<double>::infinity();
      for (const auto& pt : lg)
        if (pt.value < low) low = pt.value;
      if (!std::isfinite(low) || !(x >= p_.collapse_ratio * std::max(low, 1e-30))) continue;
      if (x > best_x) best_x = x, best_low = low, best_l = static_cast<std::int64_t>(l), best_h = h;
    }
  }
  if (best_l < 0) return;
  raise({r.step, "logit_collapse", layers_[static_cast<std::size_t>(best_l)], best_h,
         fmt::format("layer {} head {}: the max attention logit reached {:.4g} at step {}, {:.0f}x its lowest ({:.3g}) "
                     "over the previous {:.0f} steps: the softmax collapses onto single keys",
                     layers_[static_cast<std::size_t>(best_l)], best_h, best_x, r.step, best_x / std::max(best_low, 1e-30),
                     best_low, p_.collapse_window)},
        out);
}

void AlarmDetector::check_growth(const AlarmRecord& r, std::vector<Alarm>& out) {
  const auto W = static_cast<std::int64_t>(p_.window);
  struct G {
    std::size_t l;
    std::int64_t h;
    double g, from;
    std::int64_t from_step;
  };
  std::vector<G> gs;
  for (std::size_t l = 0; l < layers_.size(); ++l)
    for (std::int64_t h = 0; h < heads_; ++h) {
      const auto& sg = history(static_cast<std::int64_t>(l), h).sigma;
      if (sg.empty() || sg.back().step != r.step) continue;
      // The earliest value within the window; it must span most of it.
      auto it = std::find_if(sg.begin(), sg.end(), [&](const Point& p) { return p.step >= r.step - W; });
      if (it == sg.end() || r.step - it->step < static_cast<std::int64_t>(0.8 * p_.window)) continue;
      gs.push_back({l, h, std::log(sg.back().value / it->value), it->value, it->step});
    }
  if (gs.size() < 4) return;
  std::vector<double> all;
  for (const auto& g : gs) all.push_back(g.g);
  const double med = median(all);
  readings_.median_growth = med;
  std::vector<const G*> top(layers_.size(), nullptr);  // per layer, the head that outgrew the median most
  for (const auto& g : gs)
    if (!top[g.l] || g.g > top[g.l]->g) top[g.l] = &g;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    if (!top[l]) continue;
    auto& lr = readings_.layers[l];
    lr.head = top[l]->h;
    lr.excess_growth = top[l]->g - med;
    std::tie(lr.repeated_rate, lr.repeated_rate_before) = repeated_rates(static_cast<std::int64_t>(l), top[l]->h, r.step);
  }
  if (!(med <= p_.settled_growth)) return;
  const G* pick = nullptr;
  double pick_recent = 0, pick_before = 0;
  for (const auto& g : gs) {
    const double ex = g.g - med;
    if (!(ex >= p_.excess_growth) || layer_alarmed(layers_[g.l], "growth")) continue;
    const auto [recent, before] = repeated_rates(static_cast<std::int64_t>(g.l), g.h, r.step);
    if (std::isnan(recent) || std::isnan(before)) continue;
    if (!(rose(recent, before) && recent - before >= p_.trigger_rise)) continue;
    if (!pick || g.g > pick->g) pick = &g, pick_recent = recent, pick_before = before;
  }
  if (!pick) return;
  const auto layer = layers_[pick->l];
  raise({r.step, "growth", layer, pick->h,
         fmt::format("layer {} head {}: sigma_1 of its W_Q slice grew {:.2f}x over steps {}..{} while the median head grew "
                     "{:.2f}x, and its repeated-maximum rows rose from {:.1f}% to {:.1f}% of rows{}: the mechanism's "
                     "precursor (biased rounding on repeated maxima pushing W_Q along one direction)",
                     layer, pick->h, std::exp(pick->g), pick->from_step, r.step, std::exp(med), 100 * pick_before, 100 * pick_recent,
                     p_.trigger_odds && pick_recent < 1 && pick_before > 0
                         ? fmt::format(" (their odds {:.1f}x)", pick_recent / (1 - pick_recent) / (pick_before / (1 - pick_before)))
                         : std::string())},
        out);
}

}  // namespace lpdiag::alarm
