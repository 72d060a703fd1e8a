// Where the chain's links are read: the head whose W_Q grew. The strongest trigger and the
// strongest bias of a run may sit in other heads than the growth (a run can have several heads
// with repeated maxima and a biased delta error), and the strongest aligned update in another
// layer; which one is strongest decides nothing: those links are asked again at the growing head
// (C3 at its layer), and found there, they are the chain's.
#pragma once
#include <array>
#include <vector>

#include "lpdiag/analyzers/binned_trace.hpp"
#include "lpdiag/analyzers/links.hpp"

namespace lpdiag::analysis {

// A trigger's repeated-max rate just before `onset` (the median of its values over the `tol` bins
// up to it, widened to the nearest measured bins where a cadence, an observed kernel every N
// steps, left those unmeasured) and C1's margin for its series (6 noise s.d., at least half a
// point). The bias needs the trigger present, not stepping up: a rate beyond the margin is present.
struct TriggerLevel {
  double rate, margin;
  bool present() const { return rate >= margin; }
};
TriggerLevel trigger_level(const std::vector<double>& series, int onset, int tol);

// Moves C1 (links[0]) and C2 (links[1]) to the growing head (links[3]), and C3 (links[2]) to its
// layer, where they are found there, each with evidence naming where the strongest is; `tol` is
// the chain's onset slack in bins, `bias_z` C2's threshold.
void place_links(const BinnedTrace& t, double bias_z, int tol, std::array<LinkResult, 5>& links);

}  // namespace lpdiag::analysis
