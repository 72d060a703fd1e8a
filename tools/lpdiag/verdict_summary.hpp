// The answer first: three to five lines a user reads before anything else (the verdict, the
// chain or what it lacks, the reference's answer, what to do next in the user's own terms), and
// the exit code that goes with it. Shared by analyze, watch and report.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "lpdiag/analyzers/chain.hpp"
#include "lpdiag/analyzers/recorded_numerics.hpp"
#include "lpdiag/analyzers/reference_run.hpp"
#include "guard_outcome.hpp"

namespace lpdiag::cli {

// `guard`: what the guard did about a failed run (guard_outcome), which changes what to do next.
std::vector<std::string> verdict_summary(const analysis::ChainResult& c, const analysis::RecordedNumerics& n,
                                         const std::optional<analysis::ReferenceComparison>& ref = std::nullopt,
                                         const std::optional<GuardOutcome>& guard = std::nullopt);

// A healthy run whose loss turned up at the trace's end (its first warning is loss_rise_at_end):
// healthy only until the turn, which every headline says.
bool loss_rising_at_end(const analysis::ChainResult& c);

// One line per link: id, name, where and from which step, or MISSING.
std::vector<std::string> link_table(const analysis::ChainResult& c);

// 1 (a finding) when the run failed or a chain or candidate is named; 0 otherwise, a trace too
// short to judge included (it says so).
int verdict_exit_code(const analysis::ChainResult& c);

}  // namespace lpdiag::cli
