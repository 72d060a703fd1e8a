#include "guard_outcome.hpp"

#include <fmt/core.h>

#include <cmath>
#include <limits>

namespace lpdiag::cli {
namespace {

constexpr std::int64_t kSettle = 100;  // steps after a switch before its loss is read

// The mean loss of the bins whose representative step lies in [from, to).
double mean_loss(const analysis::BinnedTrace& t, std::int64_t from, std::int64_t to) {
  double sum = 0, n = 0;
  for (int b = 0; b < t.bins; ++b) {
    const auto s = t.bin_step(b);
    if (s < from || s >= to) continue;
    sum += t.steps[static_cast<std::size_t>(b)].loss_sum, n += t.steps[static_cast<std::size_t>(b)].loss_n;
  }
  return n > 0 ? sum / n : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

std::optional<GuardOutcome> guard_outcome(const AnalyzedRun& run) {
  const auto& c = run.c;
  if (!c.judged || c.run.healthy || c.run.failure.onset_step < 0) return std::nullopt;
  const TraceEvent* first = nullptr;
  for (const auto& e : run.alarm_events)
    if (e.kind == "guard_switch" && (!first || e.step < first->step)) first = &e;
  if (!first) return std::nullopt;
  GuardOutcome g;
  g.onset_step = c.run.failure.onset_step;
  g.switch_step = first->step, g.layer_index = first->layer_index;
  g.after_onset = g.switch_step >= g.onset_step;
  if (g.after_onset) {
    const auto& t = run.t;
    const auto span = std::max<std::int64_t>(1, (t.last_step - t.first_step) / 10);
    g.after_from = g.switch_step + kSettle;
    g.before_from = std::max(t.first_step, g.onset_step - span);
    g.loss_after = mean_loss(t, g.after_from, t.last_step + 1);
    g.loss_before = mean_loss(t, g.before_from, g.onset_step);
  }
  return g;
}

std::string guard_outcome_line(const GuardOutcome& g) {
  if (!g.after_onset)
    return fmt::format("guard: layer {} switched at step {}, {} steps before the failure's onset; the run failed after it", g.layer_index,
                       g.switch_step, g.onset_step - g.switch_step);
  const std::string head = fmt::format("guard: layer {} switched at step {}, {} steps after the failure's onset; ", g.layer_index,
                                       g.switch_step, g.switch_step - g.onset_step);
  if (std::isnan(g.loss_after)) return head + fmt::format("the trace ends before step {}, too soon after it to read the loss", g.after_from);
  return head + fmt::format("the loss from step {} to the end averaged {:.4g}, against {:.4g} over steps {}..{} before the onset ({:.2f}x)",
                            g.after_from, g.loss_after, g.loss_before, g.before_from, g.onset_step - 1, g.loss_after / g.loss_before);
}

nlohmann::json guard_outcome_json(const GuardOutcome& g) {
  auto num = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  nlohmann::json j = {{"onset_step", g.onset_step}, {"switch_step", g.switch_step}, {"layer_index", g.layer_index},
                      {"after_onset", g.after_onset}};
  if (g.after_onset) {
    j["loss_after"] = num(g.loss_after), j["after_from"] = g.after_from;
    j["loss_before"] = num(g.loss_before), j["before_from"] = g.before_from;
  }
  return j;
}

}  // namespace lpdiag::cli
