// One analyzer per link of the causal chain (docs/design.md, "The causal chain"). Each finds an
// onset, a localization, an effect size, the evidence series and a confidence, or reports the
// link absent with what it saw.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lpdiag/analyzers/binned_trace.hpp"

namespace lpdiag::analysis {

struct LinkResult {
  std::string id;    // C1..C5
  std::string name;  // "trigger", ...
  bool present = false;
  int onset_bin = -1;
  std::int64_t onset_step = -1;
  std::int64_t layer_index = -1;  // -1: not localized (C5 is global)
  std::int64_t head = -1;         // -1: not localized to a head (C3 is per layer)
  double effect = 0.0;            // link-specific, see evidence
  double confidence = 0.0;        // 0..1
  std::string evidence;           // one sentence with the numbers
  std::vector<double> series;     // the evidence series, one value per bin (NaN where empty)
};

// C1: repeated-max row rate of a (layer, head) rises above its own baseline.
// `only_layer`/`only_head` >= 0: that (layer_index, head) alone (the chain asks at the growth's
// head when the strongest trigger is elsewhere).
LinkResult analyze_trigger(const BinnedTrace& t, std::int64_t only_layer = -1, std::int64_t only_head = -1);
// C2: delta (and O) error mean significantly non-zero (|z| >= 4) and one-signed over a window.
// `only_layer`/`only_head` >= 0: that (layer_index, head) alone, at the threshold of the full
// search (the chain asks at the trigger's head when the strongest bias is elsewhere).
LinkResult analyze_bias(const BinnedTrace& t, double z_threshold = 4.0, std::int64_t only_layer = -1, std::int64_t only_head = -1);
// C3: W_Q update concentration and top-direction similarity rise and stay high.
// `only_layer` >= 0: that layer alone (the chain asks at the growth's layer when the strongest
// step up is in another layer).
LinkResult analyze_updates(const BinnedTrace& t, std::int64_t only_layer = -1);
// C4: sustained growth of sigma_1 of a W_Q head slice, with its change point.
LinkResult analyze_growth(const BinnedTrace& t);
// Every head of layer `layer_index` whose growth C4 singles out, each as C4 would report it.
std::vector<LinkResult> growing_heads(const BinnedTrace& t, std::int64_t layer_index);
// log sigma_1 of one W_Q head slice (whole W_Q without head slices) minus the median over all
// heads: the growth C4 measures (NaN where unmeasured).
std::vector<double> excess_log_sigma(const BinnedTrace& t, std::size_t layer, std::int64_t head);
// Growth factor of the median W_Q head's sigma_1 over the run (the background C4 removes).
double global_growth(const BinnedTrace& t);
// C5: loss spike (robust z over a rolling median) or a non-finite loss.
LinkResult analyze_loss(const BinnedTrace& t);

// Per-bin series used by several links (NaN where the bin has no data).
std::vector<double> repeated_rate(const BinnedTrace& t, std::size_t layer, std::int64_t head);
std::vector<double> delta_z(const BinnedTrace& t, std::size_t layer, std::int64_t head);
std::vector<double> delta_mean(const BinnedTrace& t, std::size_t layer, std::int64_t head);
std::vector<double> o_z(const BinnedTrace& t, std::size_t layer, std::int64_t head);
std::vector<double> head_sigma(const BinnedTrace& t, std::size_t layer, std::int64_t head);
std::vector<double> loss_series(const BinnedTrace& t);

}  // namespace lpdiag::analysis
