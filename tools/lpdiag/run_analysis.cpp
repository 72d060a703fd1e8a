#include "run_analysis.hpp"

#include <fmt/core.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "lpdiag/error.hpp"

#include "lpdiag/analyzers/recorded_numerics.hpp"

#include "lpdiag/trace/preflight.hpp"
#include "lpdiag/trace/trace_reader.hpp"

namespace lpdiag::cli {
namespace {

// Several files are read as one run only when they are its rank files: one world size, as many
// files as ranks, each rank once, one run_config. Anything else would merge unrelated runs into
// one verdict.
void require_rank_files(const std::vector<std::string>& paths) {
  if (paths.size() < 2) return;
  std::vector<bool> seen;
  std::string config;
  std::int64_t world = -1;
  for (const auto& p : paths) {
    const TraceReader r(p);
    const auto& m = r.meta();
    const std::string why = fmt::format("{} is rank {} of {}", p, m.rank, m.world_size);
    if (world < 0) world = m.world_size, config = m.run_config, seen.assign(static_cast<std::size_t>(std::max<std::int64_t>(world, 0)), false);
    if (m.world_size != world || m.world_size != static_cast<std::int64_t>(paths.size()) || m.rank < 0 || m.rank >= world ||
        seen[static_cast<std::size_t>(m.rank)] || m.run_config != config)
      throw InputError(fmt::format("the {} files are not the rank files of one run ({}{}); analyze each run on its own, or pass "
                                   "all {} rank files of one run",
                                   paths.size(), why, m.run_config != config ? ", with another run_config than the first" : "",
                                   std::max<std::int64_t>(world, 1)));
    seen[static_cast<std::size_t>(m.rank)] = true;
  }
}

// What the Monitor could not record, from the trace's events: counters of a layer it does not
// have (a wrong n_head, or q/k/v not in (B, H, N, d)), a step recorded twice, a declaration the
// op contradicted. A verdict drawn without those records says so first.
void note_recording_problems(const TraceReader& r, analysis::ChainResult& c) {
  std::int64_t unregistered = 0, repeated = 0, contradicted = 0;
  std::string first_unregistered, first_contradicted;
  for (const auto& e : r.events()) {
    if (e.kind == "unregistered_layer") {
      if (unregistered++ == 0) first_unregistered = fmt::format("at step {}: {}", e.step, e.message);
    } else if (e.kind == "step_not_increasing") {
      ++repeated;
    } else if (e.kind == "declared_numerics_contradicted") {
      if (contradicted++ == 0) first_contradicted = fmt::format("layer {}: {}", e.layer_index, e.message);
    }
  }
  std::vector<std::string> notes;
  if (unregistered > 0)
    notes.push_back(fmt::format("WARNING: attention counters were not recorded for {} layer(s) ({}): their head count did not match "
                                "the Monitor's; a wrong n_head, or q, k, v passed as (B, N, H, d) where (B, H, N, d) is expected. "
                                "The verdict below lacks those layers",
                                unregistered, first_unregistered));
  if (repeated > 0)
    notes.push_back("note: record() was called with a step that did not increase; those records were skipped (once per optimizer "
                    "step is what the trace keeps)");
  if (contradicted > 0)
    notes.push_back(fmt::format("note: the attention numerics declared to the Monitor differ from what the op ran ({}); the trace "
                                "records what ran",
                                first_contradicted));
  c.findings.insert(c.findings.begin(), notes.begin(), notes.end());
  if (c.open_finding >= 0) c.open_finding += static_cast<int>(notes.size());
  c.recording_problems = unregistered;
}

}  // namespace

AnalyzedRun analyze_run(const std::vector<std::string>& paths, int bins, double bias_z, int workers, const analysis::Progress& progress,
                        bool o_error) {
  for (const auto& p : paths) preflight_trace(p);
  require_rank_files(paths);
  AnalyzedRun r;
  r.t = analysis::bin_traces(paths, bins, progress, workers, o_error);
  r.c = analysis::reconstruct_chain(r.t, bias_z);
  const TraceReader first(paths.front());
  r.run_config = first.meta().run_config;
  r.numerics = analysis::recorded_numerics(first.layout().attention);
  analysis::account_for_numerics(r.c, r.numerics);
  note_recording_problems(first, r.c);
  for (const auto& e : first.events())
    if (e.kind == "alarm" || e.kind == "guard_switch" || e.kind == "guard_failed") r.alarm_events.push_back(e);
  return r;
}

std::optional<std::string> live_alarm_thresholds(const AnalyzedRun& run) { return live_alarm_thresholds(run.run_config); }

std::optional<std::string> live_alarm_thresholds(const std::string& run_config) {
  const auto j = nlohmann::json::parse(run_config, nullptr, false);
  if (!j.is_object() || !j.contains("alarm") || !j["alarm"].is_string()) return std::nullopt;
  return j["alarm"].get<std::string>();
}

std::vector<std::string> alarm_lines(const AnalyzedRun& run) {
  std::vector<std::string> out;
  const auto thresholds = live_alarm_thresholds(run);
  if (!run.alarm_events.empty() && thresholds && *thresholds != "default")
    out.push_back("live alarm thresholds: " + *thresholds);
  for (const auto& e : run.alarm_events) {
    const std::string where = e.layer_index >= 0 ? fmt::format(" (layer {})", e.layer_index) : "";
    if (e.kind == "alarm") out.push_back(fmt::format("alarm at step {}{}: {}", e.step, where, e.message));
    else if (e.kind == "guard_switch") out.push_back(fmt::format("guard at step {}{}: {}", e.step, where, e.message));
    else out.push_back(fmt::format("guard FAILED at step {}{}: {}", e.step, where, e.message));
  }
  const auto cut = [](const TraceEvent& e) {
    return e.kind == "alarm" && e.message.size() >= 3 && e.message.compare(e.message.size() - 3, 3, "...") == 0;
  };
  if (std::any_of(run.alarm_events.begin(), run.alarm_events.end(), cut))
    out.push_back(fmt::format("(an alarm's whole evidence: lpdiag alarm {})", run.t.files.front()));
  return out;
}

analysis::ReferenceComparison compare_runs(const AnalyzedRun& run, const std::string& ref_path, const AnalyzedRun& ref) {
  analysis::RunFacts a = analysis::read_run_facts(run.t.files.front()), b = analysis::read_run_facts(ref.t.files.front());
  return analysis::compare_with_reference(ref_path, run.c, ref.c, a, b, &run.t, &ref.t);
}

}  // namespace lpdiag::cli
