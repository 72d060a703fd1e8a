// What the guard did about a failed run: whether its first switch came before or after the
// failure's onset, and the loss after a switch that came after it against the loss before the
// onset. Numbers, not a verdict: the run's verdict stays the failure rules' (the loss did leave
// its trend), and the user reads whether it came back. Shared by analyze (text and --json) and
// the report.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "run_analysis.hpp"

namespace lpdiag::cli {

struct GuardOutcome {
  std::int64_t onset_step = -1;
  std::int64_t switch_step = -1, layer_index = -1;  // the guard's first switch
  bool after_onset = false;
  // After the onset only: the mean recorded loss from `after_from` (100 steps after the switch)
  // to the trace's end, and over the tenth of the run before the onset; NaN where no record
  // falls in the span.
  std::int64_t after_from = -1, before_from = -1;
  double loss_after = 0, loss_before = 0;
};

// Only for a failed run whose trace holds a guard switch.
std::optional<GuardOutcome> guard_outcome(const AnalyzedRun& run);
std::string guard_outcome_line(const GuardOutcome& g);
nlohmann::json guard_outcome_json(const GuardOutcome& g);

}  // namespace lpdiag::cli
