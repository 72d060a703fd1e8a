// The links moved to the head the chain ends in (link_placement.hpp).
#include "link_placement.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <string>
#include <utility>

#include "change_point.hpp"
#include "series_tools.hpp"

namespace lpdiag::analysis {

TriggerLevel trigger_level(const std::vector<double>& series, int onset, int tol) {
  int w = std::max(1, tol);
  auto before = tools::finite_values(series, std::max(0, onset - w), std::max(1, onset + 1));
  while (before.empty() && onset - w > 0) {
    w *= 2;
    before = tools::finite_values(series, std::max(0, onset - w), std::max(1, onset + 1));
  }
  return {before.empty() ? tools::nan() : tools::median(before), std::max(6 * cp::diff_noise_sd(series), 0.005)};
}

namespace {

// Trigger and bias still elsewhere than the growth: the chain would end in the head that grew,
// so that head is asked for the bias (the same threshold) and for the trigger, which the bias
// needs present, not stepping up (trigger_level): a repeated-max rate that rose and fell again
// before the failure steps up over no trend (the lr 1e-3 GPT-2-small failure at seed 10: the
// growing head's rate went from 3% to 65% and back to 12-20%, while the strongest step up came
// in another head at the failure itself). Both found there, they are the chain's.
void ask_growing_head(const BinnedTrace& t, double bias_z, int tol, std::array<LinkResult, 5>& links) {
  const LinkResult& g = links[3];
  auto here = [&](const LinkResult& l) { return l.present && l.layer_index == g.layer_index && l.head == g.head; };
  if (!g.present || g.head < 0 || (here(links[0]) && here(links[1]))) return;
  LinkResult bias = here(links[1]) ? links[1] : analyze_bias(t, bias_z, g.layer_index, g.head);
  LinkResult trig = links[0];
  if (bias.present && !here(trig)) {
    const auto rate = repeated_rate(t, t.layer_slot(g.layer_index), g.head);
    const TriggerLevel lv = trigger_level(rate, bias.onset_bin, tol);
    if (lv.present()) {
      const std::string strongest = trig.present ? fmt::format("the strongest step up is at layer {} head {}, step {}", trig.layer_index,
                                                               trig.head, trig.onset_step)
                                                 : std::string("no head's rate stepped up");
      tools::set_found(trig, t, bias.onset_bin, g.layer_index, g.head, lv.rate, 1.0 - lv.margin / lv.rate, rate);
      trig.evidence = fmt::format("repeated-max row rate of layer {} head {} was {:.4f} when its bias began (step {}), beyond C1's margin "
                                  "{:.4f}: present at the growth's head, without a step up over its trend ({})",
                                  g.layer_index, g.head, lv.rate, bias.onset_step, lv.margin, strongest);
    }
  }
  if (bias.present && here(trig)) {
    if (!here(links[1]))
      bias.evidence += fmt::format(" (at the growth's head; the strongest delta-error bias is at layer {} head {})", links[1].layer_index,
                                   links[1].head);
    links[0] = std::move(trig), links[1] = std::move(bias);
  }
}

}  // namespace

void place_links(const BinnedTrace& t, double bias_z, int tol, std::array<LinkResult, 5>& links) {
  // The strongest trigger may sit in another head than the growth: a run can have several heads
  // with repeated maxima and a biased delta error (the GPT-2-small failure of docs/results/reproduction.md,
  // layer 2 heads 1 and 7), and which one steps up most decides nothing. The chain
  // ends in the head that grew, so where W_Q's growth singles out a head, the trigger is asked
  // there too, by the same rule; found there, it is the chain's.
  // Link `i`, found strongest in another head than link `j`, asked again in j's head by
  // `ask(layer, head)`; found there, it is the chain's, its evidence naming where the strongest is.
  auto relocate = [&](std::size_t i, std::size_t j, const char* where, const char* what, auto ask) {
    const LinkResult &li = links[i], &lj = links[j];
    if (!li.present || !lj.present || lj.head < 0 || (li.layer_index == lj.layer_index && li.head == lj.head)) return;
    LinkResult there = ask(lj.layer_index, lj.head);
    if (!there.present) return;
    there.evidence += fmt::format(" (at the {}'s head; the strongest {} is at layer {} head {})", where, what, li.layer_index, li.head);
    links[i] = std::move(there);
  };
  relocate(0, 3, "growth", "trigger", [&](std::int64_t l, std::int64_t h) { return analyze_trigger(t, l, h); });
  // The strongest bias may sit in another head than the trigger (heavy-tailed noise, or a
  // second biased head): the chain is about the trigger's head, so ask there too, at the same
  // threshold as the full search.
  relocate(1, 0, "trigger", "delta-error bias", [&](std::int64_t l, std::int64_t h) { return analyze_bias(t, bias_z, l, h); });
  ask_growing_head(t, bias_z, tol, links);
  // C3 is read on a layer's whole W_Q update, and the strongest step up may come in another layer
  // than the growth (a second layer whose updates aligned as well, or aligned at the failure
  // itself): the chain ends in the growing head's layer, so C3 is asked there too, by the same
  // rule; found there, it is the chain's.
  const LinkResult &u = links[2], &g = links[3];
  if (u.present && g.present && u.layer_index != g.layer_index) {
    LinkResult there = analyze_updates(t, g.layer_index);
    if (there.present) {
      there.evidence += fmt::format(" (at the growth's layer; the strongest step up is in layer {})", u.layer_index);
      links[2] = std::move(there);
    }
  }
}

}  // namespace lpdiag::analysis
