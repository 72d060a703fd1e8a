// `lpdiag watch TRACE`: follows a live trace (SWMR) and prints each link of the chain as it
// appears: an early warning before the loss explodes. Exits when the writer closes the file,
// after --idle-exit seconds without new records, or on Ctrl-C.
#include <fmt/core.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <thread>

#include "lpdiag/alarm/trace_feeder.hpp"
#include "lpdiag/analyzers/chain.hpp"
#include "lpdiag/command.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/trace/preflight.hpp"
#include "lpdiag/trace/trace_reader.hpp"
#include "run_analysis.hpp"
#include "verdict_summary.hpp"
#include "alarm_thresholds_option.hpp"

namespace lpdiag::cli {
namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_sigint(int) { g_stop = true; }

struct WatchArgs {
  std::string path;
  double interval = 2.0;
  double wait = 60.0;
  double idle_exit = 0.0;  // 0: never
  std::string thresholds = "default";
};

using Clock = std::chrono::steady_clock;

int run_watch(const WatchArgs& a) {
  std::signal(SIGINT, on_sigint);
  const auto start = Clock::now();
  while (!std::filesystem::exists(a.path)) {
    if (g_stop || std::chrono::duration<double>(Clock::now() - start).count() > a.wait)
      throw InputError(a.path + ": no such file (waited " + fmt::format("{:.0f}", a.wait) + " s for it to appear)");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // The same preflight as info/analyze: a text file, a directory, a foreign or version-2 file is
  // refused with one line (exit 2). A trace the writer is still creating may fail it for a
  // moment, so it is retried for a few seconds before the answer counts.
  for (const auto t0 = Clock::now();;) {
    try {
      if (std::filesystem::is_directory(a.path)) throw InputError(a.path + ": is a directory, not a trace file");
      preflight_trace(a.path);
      break;
    } catch (const InputError&) {
      if (g_stop || std::chrono::duration<double>(Clock::now() - t0).count() > std::max(5.0, 3 * a.interval)) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  }
  std::array<bool, 5> seen{};
  bool failure_seen = false, alarmed = false;
  int failed_polls = 0;
  // The online alarm, fed each record once as it becomes visible (lpdiag alarm replays the same).
  alarm::AlarmDetector detector(thresholds_params(a.thresholds));
  std::int64_t fed = 0;
  std::int64_t last_records = -1;
  std::size_t guard_events = 0;  // the live guard's events printed so far (the Monitor's, in the trace)
  auto last_growth = Clock::now();
  std::cout << "watching " << a.path << " (Ctrl-C to stop)" << std::endl;
  std::vector<std::string> summary;  // the latest analysis's verdict, as `lpdiag analyze` prints it
  auto verdict = [&summary] {
    if (summary.empty()) return;
    std::cout << "verdict:" << std::endl;
    for (const auto& line : summary) std::cout << "  " << line << std::endl;
  };
  for (;;) {
    bool closed = false;
    try {
      const TraceReader r(a.path);
      closed = !r.live();  // a plain read-only open succeeds only once the writer has closed
      if (r.records() != last_records) {
        last_records = r.records();
        last_growth = Clock::now();
        alarm::TraceFeeder feeder(r, fed);
        for (const auto& al : feeder.feed_new(detector)) {
          alarmed = true;
          std::cout << fmt::format("[{} records] ALARM at step {}: {}: {}", last_records, al.step, al.kind, al.evidence) << std::endl;
        }
        fed = feeder.fed();
        // What the live guard did, as the Monitor recorded it: from a switch on, that layer runs the
        // guard's numerics (under fp32 attention, with no counters), so this watch's own alarm sees
        // it only up to there.
        std::size_t k = 0;
        for (const auto& e : r.events()) {
          if (e.kind != "guard_switch" && e.kind != "guard_failed") continue;
          if (k++ < guard_events) continue;
          std::cout << fmt::format("[{} records] {} at step {} (layer {}): {}", last_records,
                                   e.kind == "guard_switch" ? "GUARD" : "GUARD FAILED", e.step, e.layer_index, e.message)
                    << std::endl;
        }
        guard_events = k;
        if (last_records > 0) {
          // The same analysis as `lpdiag analyze` (the recorded numerics accounted for), so the
          // two never disagree on one trace.
          const AnalyzedRun run = analyze_run({a.path}, 512, 4.0, 1);
          const auto& bt = run.t;
          const auto& c = run.c;
          summary = verdict_summary(c, run.numerics, std::nullopt);
          for (int k = 0; k < 5; ++k) {
            const auto& l = c.links[static_cast<std::size_t>(k)];
            if (l.present && !seen[static_cast<std::size_t>(k)]) {
              seen[static_cast<std::size_t>(k)] = true;
              std::cout << fmt::format("[{} records, step {}] {} {} from step {}: {}", last_records, bt.last_step, l.id, l.name,
                                       l.onset_step, l.evidence)
                        << std::endl;
            }
          }
          if (!c.run.healthy && !failure_seen) {
            failure_seen = true;
            std::cout << fmt::format("[{} records, step {}] RUN FAILED: {} from step {}: {}", last_records, bt.last_step, c.run.failure.kind,
                                     c.run.failure.onset_step, c.run.failure.evidence)
                      << std::endl;
          }
          if (c.found && closed) std::cout << fmt::format("causal chain at layer {} head {}", c.layer_index, c.head) << std::endl;
        }
      }
      failed_polls = 0;
    } catch (const InputError& e) {
      // A writer mid-flush can make one poll fail; the next one sees a consistent file. A file
      // that keeps failing is not a trace being written (replaced, truncated): say so.
      if (closed || ++failed_polls >= 10) throw;
    }
    if (closed) {
      std::cout << fmt::format("writer closed {} after {} records", a.path, last_records) << std::endl;
      verdict();
      return failure_seen || alarmed ? kFinding : kOk;
    }
    if (g_stop) {
      std::cout << "stopped" << std::endl;
      verdict();
      return failure_seen || alarmed ? kFinding : kOk;
    }
    if (a.idle_exit > 0 && std::chrono::duration<double>(Clock::now() - last_growth).count() > a.idle_exit) {
      std::cout << fmt::format("no new records for {:.0f} s; the writer may have died", a.idle_exit) << std::endl;
      verdict();
      return failure_seen || alarmed ? kFinding : kOk;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(a.interval * 1000)));
  }
}

}  // namespace

Registration register_watch(CLI::App& app) {
  auto args = std::make_shared<WatchArgs>();
  CLI::App* sub = app.add_subcommand(
      "watch",
      "Follow a live trace and print the online alarm (lpdiag alarm), the run verdict and each link of the chain as they appear. Records become visible as the "
      "writer flushes them: every flush_every records (default 100) or every 10 s, whichever comes first. Exit 0: the run "
      "did not fail and raised no alarm while watched; 1: it failed or alarmed; 2: unusable input");
  sub->add_option("trace", args->path, "Trace file being written")->required();
  sub->add_option("--interval", args->interval, "Seconds between polls")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--wait", args->wait, "Seconds to wait for the file to appear")->capture_default_str();
  sub->add_option("--idle-exit", args->idle_exit, "Exit after this many seconds without new records (0: never)")->capture_default_str();
  add_thresholds_option(sub, args->thresholds);
  return {sub, [args] { return run_watch(*args); }};
}

}  // namespace lpdiag::cli
