// The analyzers on 200 synthetic traces with fixed seeds: 100 planted chains, 100 nulls (20
// each: loss spike with no bias, growth with no trigger, bias with no growth, clean, and
// undriven: every link in order in one head, growth of its own). Asserts
// and prints precision, recall, localization and onset error. docs/reference/analyzers.md records the
// figures.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <algorithm>

#include "catch_compat.hpp"
#include "lpdiag/analyzers/chain.hpp"
#include "lpdiag/analyzers/synth.hpp"

using namespace lpdiag::analysis;

TEST_CASE("chain detection on 200 synthetic traces: precision, recall, localization, onsets", "[analyzers][validation]") {
  const auto dir = std::filesystem::temp_directory_path() / ("lpdiag-validation-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const SynthKind nulls[] = {SynthKind::loss_spike, SynthKind::growth_no_trigger, SynthKind::bias_no_growth, SynthKind::clean,
                             SynthKind::undriven};
  int tp = 0, fp = 0, fn = 0, tn = 0, localized = 0;
  std::vector<double> onset_err;  // |detected - planted| / trace length, every link of every detected chain
  int missing_reported_right = 0, nulls_total = 0;
  for (int i = 0; i < 200; ++i) {
    SynthOptions o;
    o.kind = i < 100 ? SynthKind::chain : nulls[i % 5];
    o.seed = 1000 + static_cast<std::uint64_t>(i);
    o.ranks = i % 10 == 9 ? 2 : 1;  // some runs come as two rank files
    const std::string path = (dir / ("t" + std::to_string(i) + ".h5")).string();
    const SynthTruth truth = write_synth_trace(path, o);
    const ChainResult c = reconstruct_chain(bin_traces(truth.files, 512));
    const bool planted = o.kind == SynthKind::chain;
    if (planted && c.found) ++tp;
    if (planted && !c.found) {
      ++fn;
      std::printf("missed chain seed %llu: missing %zu links; %s\n", (unsigned long long)o.seed, c.missing_links.size(),
                  c.findings.back().c_str());
    }
    if (!planted && c.found) ++fp, std::printf("false chain seed %llu (%s)\n", (unsigned long long)o.seed, synth_kind_name(o.kind));
    if (!planted && !c.found) ++tn;
    if (planted && c.found) {
      localized += c.layer_index == truth.layer_index && c.head == truth.head;
      const double span = double(truth.last_step - truth.first_step);
      for (int k = 0; k < 5; ++k) {
        onset_err.push_back(std::fabs(double(c.links[k].onset_step - truth.onset_step[k])) / span);
        if (onset_err.back() > 0.04)
          std::printf("seed %llu: %s onset %lld, planted %lld (error %.4f)\n", (unsigned long long)o.seed, c.links[k].id.c_str(),
                      (long long)c.links[k].onset_step, (long long)truth.onset_step[k], onset_err.back());
      }
    }
    if (!planted) {
      // The links that were not planted must be reported missing.
      ++nulls_total;
      bool right = true;
      for (int k = 0; k < 5; ++k)
        if (truth.onset_step[k] < 0 && c.links[k].present) right = false;
      missing_reported_right += right;
    }
    for (const auto& f : truth.files) std::filesystem::remove(f);
  }
  std::sort(onset_err.begin(), onset_err.end());
  const double precision = tp + fp ? double(tp) / (tp + fp) : 0, recall = double(tp) / (tp + fn);
  const double loc = tp ? double(localized) / tp : 0;
  const double med = onset_err.empty() ? 1 : onset_err[onset_err.size() / 2];
  const double worst = onset_err.empty() ? 1 : onset_err.back();
  std::printf("validation: tp %d fp %d fn %d tn %d | precision %.3f recall %.3f | localization %.3f | "
              "onset error / trace length: median %.4f, max %.4f | nulls with the right links missing %d/%d\n",
              tp, fp, fn, tn, precision, recall, loc, med, worst, missing_reported_right, nulls_total);
  CHECK(precision >= 0.95);
  // 1.000 (the synthetic bias wanders, so its driving is testable).
  CHECK(recall >= 0.95);
  CHECK(loc >= 0.95);
  // 0.0501 at seed 1080: the growth a wandering bias drives starts at the
  // bias's pace, and where the bias is low at the planted onset it shows a few bins later
  // (gen2 plants the observable start instead). Median 0.0009.
  CHECK(worst <= 0.06);
  CHECK(missing_reported_right >= 0.95 * nulls_total);
  std::filesystem::remove_all(dir);
}
