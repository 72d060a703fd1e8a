// The CUDA kernels issue's speed targets, checked from bench_attention's timings (fwd + bwd
// time per shape): counters at least as fast as SDPA's cuDNN backend (what PyTorch 2.11 runs by
// default on the H200), counters at most 5% and full at most 25% over off. Counters
// against SDPA flash, the earlier baseline, is reported but no longer gates. Pure arithmetic, no
// torch or CUDA, so that the unit tests run everywhere.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace lpdiag::bench {

struct Timing {
  std::string shape, impl;  // impl: "lpdiag off", "lpdiag counters", "lpdiag full", "sdpa flash", ...
  double fwd_ms, bwd_ms;
};

struct TargetCheck {
  std::string shape, target;  // "counters vs sdpa cudnn", "counters vs sdpa flash", "counters over off", "full over off"
  double value;               // speed ratio (>= limit passes) or fractional overhead (<= limit passes)
  double limit;
  bool met;
  bool gating = true;         // counts for --require-targets
  bool ratio() const { return target.find(" vs ") != std::string::npos; }
};

// One check per target and shape whose rows are all present (a shape timed with --ours-only
// has no SDPA row, so no first check). Shapes keep their order of first appearance.
inline std::vector<TargetCheck> check_targets(const std::vector<Timing>& rows) {
  std::vector<std::string> shapes;
  std::map<std::string, std::map<std::string, double>> total;  // shape -> impl -> fwd + bwd ms
  for (const Timing& t : rows) {
    if (!total.count(t.shape)) shapes.push_back(t.shape);
    total[t.shape][t.impl] = t.fwd_ms + t.bwd_ms;
  }
  std::vector<TargetCheck> out;
  for (const std::string& s : shapes) {
    const auto& m = total[s];
    auto has = [&](const char* impl) { return m.count(impl) > 0 && m.at(impl) > 0.0; };
    // Counters against an SDPA backend: at least as fast.
    auto versus = [&](const char* impl, bool gating) {
      if (!has("lpdiag counters") || !has(impl)) return;
      const double r = m.at(impl) / m.at("lpdiag counters");
      out.push_back({s, std::string("counters vs ") + impl, r, 1.0, r >= 1.0, gating});
    };
    versus("sdpa cudnn", true);
    versus("sdpa flash", false);
    // An instrumentation level's fractional cost over off, at most `limit`.
    auto overhead = [&](const char* level, const char* impl, double limit) {
      if (!has(impl) || !has("lpdiag off")) return;
      const double o = m.at(impl) / m.at("lpdiag off") - 1.0;
      out.push_back({s, std::string(level) + " over off", o, limit, o <= limit});
    };
    overhead("counters", "lpdiag counters", 0.05);
    overhead("full", "lpdiag full", 0.25);
  }
  return out;
}

}  // namespace lpdiag::bench
