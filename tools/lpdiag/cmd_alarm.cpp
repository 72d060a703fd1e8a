// `lpdiag alarm TRACE [--json]`: replays a finished (or live) trace through the online alarm, record
// by record, each decision using only the records up to its step: what `watch` or the Monitor
// would have raised live. Prints the first alarm (step, layer, head, evidence), then the others.
// Exit 1 when an alarm was raised, 0 when none, 2 unusable input.
#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "lpdiag/alarm/trace_feeder.hpp"
#include "lpdiag/command.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/trace/preflight.hpp"
#include "alarm_thresholds_option.hpp"
#include "run_analysis.hpp"

namespace lpdiag::cli {
namespace {

struct AlarmArgs {
  std::string path;
  bool json = false;
  std::string readings;  // CSV of the detector's readings, one row per record ("" none)
  bool overwrite = false;
  std::string thresholds = "default";
};

void check_output(const AlarmArgs& a) {
  std::error_code ec;
  if (std::filesystem::is_directory(a.readings, ec)) throw InputError(a.readings + ": is a directory; give the readings a file name");
  if (!a.overwrite && std::filesystem::exists(a.readings, ec))
    throw InputError(a.readings + ": already exists and was left untouched; pass --overwrite to replace it, or name another file");
}

std::string cell(double x) { return std::isfinite(x) ? fmt::format("{:.9g}", x) : ""; }

// One CSV row per record: what the detector read after it (alarm_detector.hpp, Readings); an
// unmeasured value is an empty cell. Columns per attention layer L: L<L>_head (the head that
// outgrew the median most), L<L>_excess_growth, L<L>_repeated_rate, L<L>_repeated_rate_before,
// L<L>_logit_max.
class ReadingsCsv {
 public:
  explicit ReadingsCsv(const std::string& path) : path_(path), out_(path) {
    if (!out_) throw InputError(path + ": cannot be written (" + std::strerror(errno) + ")");
  }
  void row(const alarm::Readings& r) {
    if (!header_) {  // layers in layer order (a trace lists them in its own)
      for (std::size_t i = 0; i < r.layers.size(); ++i) order_.push_back(i);
      std::stable_sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) { return r.layers[a].layer_index < r.layers[b].layer_index; });
      out_ << "step,loss_over_best,median_growth";
      for (std::size_t i : order_)
        for (const char* c : {"head", "excess_growth", "repeated_rate", "repeated_rate_before", "logit_max"})
          out_ << fmt::format(",L{}_{}", r.layers[i].layer_index, c);
      out_ << "\n";
      header_ = true;
    }
    out_ << r.step << "," << cell(r.loss_over_best) << "," << cell(r.median_growth);
    for (std::size_t i : order_) {
      const auto& l = r.layers[i];
      out_ << "," << (l.head >= 0 ? std::to_string(l.head) : "") << "," << cell(l.excess_growth) << "," << cell(l.repeated_rate)
           << "," << cell(l.repeated_rate_before) << "," << cell(l.logit_max);
    }
    out_ << "\n";
  }
  void close() {
    out_.close();
    if (!out_) throw InputError(path_ + ": writing the readings failed (disk full?)");
  }

 private:
  std::string path_;
  std::ofstream out_;
  bool header_ = false;
  std::vector<std::size_t> order_;
};

nlohmann::json alarm_json(const alarm::Alarm& a) {
  return {{"step", a.step},
          {"kind", a.kind},
          {"layer_index", a.layer_index >= 0 ? nlohmann::json(a.layer_index) : nlohmann::json(nullptr)},
          {"head", a.head >= 0 ? nlohmann::json(a.head) : nlohmann::json(nullptr)},
          {"evidence", a.evidence}};
}

// What the trace does not let the detector see, in the user's terms; "" when it sees everything.
std::string blind_spot(const alarm::TraceFeeder& f) {
  if (f.has_counters() && f.has_head_sigma()) return "";
  std::string what = !f.has_counters() ? "no attention counters (run the attention through lpdiag, or observe it: lpdiag.observed, "
                                         "observe_sdpa, Monitor(observe_every=N))"
                                       : "no per-head spectral norms of W_Q (the Monitor's weights cadence)";
  return "the growth precursor cannot be seen: the trace holds " + what +
         "; only a logit collapse, a loss explosion or a non-finite value can raise an alarm, as it happens";
}

// The live guard's switches, as the trace recorded them, and the thresholds of the live alarm that
// raised them (nullopt where the trace predates that record).
struct LiveGuard {
  std::vector<TraceEvent> switches;
  std::optional<std::string> thresholds;
  const TraceEvent* switch_of(std::int64_t layer_index) const {
    for (const auto& e : switches)
      if (e.layer_index == layer_index) return &e;
    return nullptr;
  }
};

LiveGuard live_guard(const TraceReader& r) {
  LiveGuard g;
  for (const auto& e : r.events())
    if (e.kind == "guard_switch") g.switches.push_back(e);
  std::sort(g.switches.begin(), g.switches.end(), [](const TraceEvent& a, const TraceEvent& b) { return a.step < b.step; });
  g.thresholds = live_alarm_thresholds(r.meta().run_config);
  return g;
}

// A guarded trace records each switched layer under the guard's numerics from its switch on
// (under fp32 attention, with no counters at all), not as the unguarded run would have gone on:
// a replay can show what other thresholds would have raised only up to the first switch.
std::string guard_note(const LiveGuard& g) {
  if (g.switches.empty()) return "";
  std::string list;
  for (const auto& e : g.switches)
    list += fmt::format("{}layer {} at step {}", list.empty() ? "" : ", ", e.layer_index, e.step);
  return fmt::format("the run was guarded live{}, switching {}. From its switch on, a layer is recorded under the guard's numerics (under "
                     "fp32 attention, with no counters), so a replay says what other thresholds would have raised only up to "
                     "step {}",
                     g.thresholds ? " (alarm thresholds: " + *g.thresholds + ")" : "", list, g.switches.front().step);
}

// What an alarm of this kind means and what to do, for the text output: the growth alarm sees
// the mechanism's precursor, which in the measured runs also came in runs whose loss did not
// explode (docs/results/alarm.md), so it says so, and that the guard costs speed, not learning
// (or, where the live guard already switched the layer, when).
std::string meaning(const alarm::Alarm& a, const LiveGuard& g) {
  const TraceEvent* sw = a.layer_index >= 0 ? g.switch_of(a.layer_index) : nullptr;
  if (a.kind == "growth")
    return "what it means: the precursor of the failure lpdiag explains, in this head; a warning, not a verdict: in the "
           "measured runs it came before most late loss explosions, and also in about half the runs whose loss did not "
           "explode (docs/results/alarm.md)\n" +
           (sw ? fmt::format("next: the live guard switched layer {} at step {}; `lpdiag analyze` on the trace says how the run went on",
                             sw->layer_index, sw->step)
               : std::string("next: guard the layer (Monitor(..., guard=\"fp32\"), gpt2_train --guard fp32: the switched layer costs "
                             "speed, not learning), or keep watching; when the run ends, `lpdiag analyze` on its trace"));
  if (a.kind == "logit_collapse")
    return "what it means: the layer's attention logits reached one-hot levels (entropy collapse); in the measured runs "
           "some learned through it and some failed (docs/results/alarm.md)\n"
           "next: `lpdiag analyze` on the trace says which this run did";
  return "what it means: the run is failing now\n"
         "next: `lpdiag analyze` on the trace for the verdict and the chain, and the run that decides it";
}

int run_alarm(const AlarmArgs& a) {
  preflight_trace(a.path);
  TraceReader reader(a.path);
  alarm::TraceFeeder feeder(reader);
  alarm::AlarmDetector det(thresholds_params(a.thresholds));
  if (a.readings.empty()) {
    feeder.feed_new(det);
  } else {
    check_output(a);
    ReadingsCsv csv(a.readings);
    for (const auto& rec : feeder.read_new()) {
      det.feed(rec);
      csv.row(det.readings());
    }
    csv.close();
  }
  const auto& alarms = det.alarms();
  const std::string blind = blind_spot(feeder);
  const LiveGuard guard = live_guard(reader);
  if (a.json) {
    nlohmann::json j = {{"trace", a.path},
                        {"records", reader.records()},
                        {"thresholds", a.thresholds},
                        {"alarm", alarms.empty() ? nlohmann::json(nullptr) : alarm_json(alarms.front())},
                        {"alarms", nlohmann::json::array()},
                        {"sees", {{"attention_counters", feeder.has_counters()}, {"head_sigma", feeder.has_head_sigma()}}},
                        {"blind_spot", blind.empty() ? nlohmann::json(nullptr) : nlohmann::json(blind)},
                        {"guard_switches", nlohmann::json::array()},
                        {"live_thresholds", guard.thresholds ? nlohmann::json(*guard.thresholds) : nlohmann::json(nullptr)}};
    for (const auto& x : alarms) j["alarms"].push_back(alarm_json(x));
    for (const auto& e : guard.switches) j["guard_switches"].push_back({{"step", e.step}, {"layer_index", e.layer_index}, {"message", e.message}});
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << fmt::format("{} ({} records{})\n", a.path, reader.records(),
                             a.thresholds == "default" ? "" : ", thresholds " + a.thresholds);
    if (alarms.empty()) {
      std::cout << "no alarm\n";
    } else {
      const auto& f = alarms.front();
      std::cout << fmt::format("ALARM at step {}: {}{}\n", f.step, f.kind,
                               f.layer_index >= 0 ? fmt::format(" at layer {}{}", f.layer_index, f.head >= 0 ? fmt::format(" head {}", f.head) : "")
                                                  : "");
      std::cout << "  " << f.evidence << "\n";
      for (std::size_t i = 1; i < alarms.size(); ++i)
        std::cout << fmt::format("then step {}: {}: {}\n", alarms[i].step, alarms[i].kind, alarms[i].evidence);
      std::cout << meaning(f, guard) << "\n";
    }
    if (!blind.empty()) std::cout << "note: " << blind << "\n";
    if (const std::string g = guard_note(guard); !g.empty()) std::cout << "note: " << g << "\n";
  }
  return alarms.empty() ? kOk : kFinding;
}

}  // namespace

Registration register_alarm(CLI::App& app) {
  auto args = std::make_shared<AlarmArgs>();
  CLI::App* sub = app.add_subcommand(
      "alarm",
      "Replay a trace through the online alarm, step by step (no look-ahead): the first alarm watch or the Monitor would have "
      "raised. Exit 1 when an alarm was raised, 0 none, 2 unusable input");
  sub->add_option("trace", args->path, "Trace file")->required();
  sub->add_flag("--json", args->json,
                "One JSON object: {\"alarm\": null | {step, kind, layer_index, head, evidence}, \"alarms\": [...], \"sees\": ..., "
                "\"blind_spot\": ..., \"thresholds\": ..., \"guard_switches\": [{step, layer_index, message}] (the live guard's, from "
                "the trace), \"live_thresholds\": the live alarm's thresholds or null}");
  sub->add_option("--readings", args->readings,
                  "Also write FILE.csv: what the detector read after each record (the loss's running median over its best, the "
                  "median head's growth, and per layer the head that outgrew it most: its excess growth and repeated-maximum "
                  "rates, and the largest logit), the numbers its thresholds are compared with");
  sub->add_flag("--overwrite", args->overwrite, "Replace an existing --readings file (without it, an existing file is refused)");
  add_thresholds_option(sub, args->thresholds);
  return {sub, [args] { return run_alarm(*args); }};
}

}  // namespace lpdiag::cli
