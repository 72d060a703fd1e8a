#include "verdict_summary.hpp"

#include <fmt/core.h>

#include "lpdiag/command.hpp"

namespace lpdiag::cli {
namespace {

std::string where(const analysis::LinkResult& l) {
  if (l.layer_index < 0) return "";
  return l.head >= 0 ? fmt::format("layer {} head {}", l.layer_index, l.head) : fmt::format("layer {}", l.layer_index);
}

// What to do next, in the terms of a user who trains in Python (and of the C++ example).
std::string next_step(const analysis::ChainResult& c, const analysis::RecordedNumerics& n,
                      const std::optional<analysis::ReferenceComparison>& ref, const std::optional<GuardOutcome>& guard) {
  if (!c.judged) return "next: record at least " + std::to_string(analysis::kMinRecords) + " steps, then analyze again";
  const bool bias_unrecorded = c.links[1].evidence.find("no delta-error statistics") != std::string::npos;
  if (bias_unrecorded && !n.all_external && !n.all_fp32)
    return "next: record the delta error (lpdiag.Monitor(..., level=\"counters\", full_every=50); gpt2_train --level full "
           "--full-every 50) to test for biased rounding";
  if (loss_rising_at_end(c))
    return "next: the loss was rising when the trace ended: train on (or rerun longer) with the Monitor recording and analyze "
           "again; `lpdiag alarm` on this trace shows whether a layer was warned of";
  if (c.run.healthy && !c.found && !c.undecided) return "next: nothing to do; keep recording, and run `lpdiag watch` on the live trace";
  if (ref && ref->attributable.has_value() && *ref->attributable)
    return "next: train with numerics that do not round with a bias: fix=\"paper\" or fix=\"sr\" (stochastic rounding) in "
           "lpdiag.attention, or fp32 attention for the affected layers";
  // A guard that switched after the failure began came too late to prevent it; one that switched
  // before it and still saw the run fail switched a layer that was not (or not the only) cause.
  if (guard && guard->after_onset)
    return fmt::format("next: the guard switched layer {} at step {}, {} steps after the failure began, too late to prevent it: restart "
                       "from a checkpoint taken well before step {} with that layer switched from there (mon.guard_layer({}); "
                       "gpt2_train --guard-at STEP:{}; the earlier the switch, the more it saves); `lpdiag alarm RUN.h5` shows when "
                       "the warning came",
                       guard->layer_index, guard->switch_step, guard->switch_step - guard->onset_step, guard->onset_step,
                       guard->layer_index, guard->layer_index);
  if (guard && (c.found || c.undecided) && c.layer_index != guard->layer_index)
    return fmt::format("next: the run failed {} steps after the guard switched layer {}, and the chain is at layer {}: guard that layer "
                       "too (mon.guard_layer({}); gpt2_train --guard-at STEP:{})",
                       guard->onset_step - guard->switch_step, guard->layer_index, c.layer_index, c.layer_index, c.layer_index);
  if (guard)
    return fmt::format("next: the run failed {} steps after the guard switched layer {}: rerun the same config, seed and data with fp32 "
                       "attention in every layer and pass it as --reference, which says whether attention rounding is the cause",
                       guard->onset_step - guard->switch_step, guard->layer_index);
  if (c.undecided && !c.untested.empty())
    return fmt::format("next: the trace ends too soon after the failure to show {}: train on past the failure with the Monitor recording "
                       "(or rerun longer) and analyze again, or rerun the same config, seed and data with fp32 attention and pass it "
                       "as --reference",
                       c.untested);
  if (n.all_fp32) return "next: look beyond attention rounding (learning rate, data, other low-precision ops): fp32 attention failed too";
  return "next: rerun the same config, seed and data with fp32 attention (lpdiag.attention(..., policy=\"fp32\"); gpt2_train "
         "--attention sdpa-fp32), then `lpdiag analyze RUN.h5 --reference REF.h5`; to keep training meanwhile, fix=\"sr\" or "
         "fix=\"paper\"";
}

}  // namespace

bool loss_rising_at_end(const analysis::ChainResult& c) {
  return c.run.healthy && !c.run.warnings.empty() && c.run.warnings.front().kind == "loss_rise_at_end";
}

std::vector<std::string> verdict_summary(const analysis::ChainResult& c, const analysis::RecordedNumerics& n,
                                         const std::optional<analysis::ReferenceComparison>& ref,
                                         const std::optional<GuardOutcome>& guard) {
  std::vector<std::string> out;
  if (!c.judged) {
    out.push_back(fmt::format("NOT JUDGED: too few records ({}; need >= {})", c.records, analysis::kMinRecords));
    out.push_back(next_step(c, n, ref, guard));
    return out;
  }
  // A loss that turned up at the trace's end is healthy only up to the turn: the failure rules
  // cannot judge what came after it, so the headline does not call the whole run healthy.
  if (loss_rising_at_end(c))
    out.push_back(fmt::format("HEALTHY UNTIL STEP {}: the loss was rising when the trace ended (loss_rise_at_end)",
                              c.run.warnings.front().onset_step));
  else if (c.run.healthy)
    out.push_back(c.run.warnings.empty() ? "HEALTHY"
                                         : fmt::format("HEALTHY, with a warning: {} from step {}", c.run.warnings.front().kind,
                                                       c.run.warnings.front().onset_step));
  else
    out.push_back(fmt::format("FAILED: {} from step {}", c.run.failure.kind, c.run.failure.onset_step));
  if (n.observed)
    out.push_back(fmt::format("observed kernel: {} (measured from outside the kernel{}: repeated maxima, O and delta errors)",
                              n.observed_kernels, n.observe_every > 0 ? fmt::format(" every {} steps", n.observe_every) : ""));
  if (c.found)
    out.push_back(fmt::format("causal chain at layer {} head {} (confidence {:.2f}{})", c.layer_index, c.head, c.confidence,
                              c.driving == "reference" ? ", decided by the reference run" : ""));
  else if (c.undecided && !c.untested.empty())
    out.push_back(fmt::format("candidate chain at layer {} head {}: every link present but {}; undecided (a longer trace or a reference "
                              "run decides)",
                              c.layer_index, c.head, analysis::untested_link_text(c)));
  else if (c.undecided)
    out.push_back(fmt::format("candidate chain at layer {} head {}: every link present, undecided (the trace cannot show that the bias "
                              "drives the growth; a reference run decides)",
                              c.layer_index, c.head));
  else if (!c.untested.empty())  // rejected on the other links: say why, not "missing" the untested one
    out.push_back("no causal chain: " + c.rejected_because + " (" + c.untested + " untested: the trace ends too soon after the failure)");
  else
    out.push_back("no causal chain: " + (c.missing_links.empty() ? std::string("the links are present but not in one head and order")
                                                                   : "missing " + analysis::missing_links_text(c)));
  if (ref) {
    const char* answer = !ref->attributable ? "UNDECIDED" : *ref->attributable ? "YES" : "NO";
    out.push_back(fmt::format("attributable to the attention numerics (against {}): {}", ref->path, answer));
  }
  out.push_back(next_step(c, n, ref, guard));
  return out;
}

std::vector<std::string> link_table(const analysis::ChainResult& c) {
  std::vector<std::string> out;
  for (const auto& l : c.links)
    out.push_back(l.present ? fmt::format("  {} {:<30} {:<18} from step {}", l.id, l.name, where(l), l.onset_step)
                            : fmt::format("  {} {:<30} MISSING", l.id, l.name));
  return out;
}

int verdict_exit_code(const analysis::ChainResult& c) {
  if (!c.judged) return kOk;
  return !c.run.healthy || c.found || c.undecided ? kFinding : kOk;
}

}  // namespace lpdiag::cli
