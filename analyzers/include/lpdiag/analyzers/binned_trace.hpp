// A trace (or the rank files of one run) reduced to at most `max_bins` time bins, in one
// streaming pass: memory is bins x heads x a few fields, whatever the number of steps. Every
// link analyzer works on this. Bins cover equal ranges of step numbers, so irregular strides,
// NaN gaps and several ranks (merged by step) need no special handling.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lpdiag::analysis {

// Sums over the records that fall into one bin, for one (layer, head).
struct HeadBin {
  double rows = 0, repeated = 0;
  double o_count = 0, o_sum = 0, o_sumsq = 0;
  double d_count = 0, d_sum = 0, d_sumsq = 0;
  double sigma_sum = 0, sigma_n = 0;  // head slice of W_Q: sigma_1
  double logit_max = -1;              // max of S over the bin's records (-1: none measured)
};

struct LayerBin {
  double conc_sum = 0, conc_n = 0;  // W_Q update concentration
  double sim_sum = 0, sim_n = 0;    // W_Q update similarity with the previous record
  double sigma_sum = 0, sigma_n = 0;  // sigma_1 of the whole W_Q
};

struct StepBin {
  std::int64_t first_step = 0, last_step = -1;  // steps seen in the bin; last < first: empty
  double loss_sum = 0, loss_n = 0;
  // Records whose loss is +-Inf, or that a nan_inf event marks (a NaN loss is the trace's
  // "not measured" unless an event says the value was computed and not finite).
  double loss_nonfinite = 0;
  std::int64_t first_nonfinite_step = INT64_MAX;
};

struct BinnedTrace {
  std::vector<std::string> files;
  std::int64_t first_step = 0, last_step = 0, records = 0;
  double bin_width = 1;  // steps per bin
  int bins = 0;
  std::vector<std::int64_t> layers;  // layer_index of each attention layer, ascending
  std::int64_t heads = 0;            // max n_heads over layers
  std::vector<StepBin> steps;                // [bins]
  std::vector<HeadBin> head_bins;            // [layer][head][bin]
  std::vector<LayerBin> layer_bins;          // [layer][bin]
  bool has_head_sigma = false, has_updates = false, has_logits = false;
  bool read_o_error = false;
  // Values that cannot be right, skipped as unmeasured and counted for a warning: counters with
  // more repeated-max rows than rows, negative spectral norms, and the rest (counts below -1, the
  // unmeasured mark; negative sums of squares; concentration or similarity outside [0, 1]).
  std::int64_t rates_above_one = 0, negative_norms = 0, other_impossible = 0;  // O error sums binned too (the report's plot; no link reads them)
  std::int64_t first_nonfinite_step = -1;  // first non-finite loss or nan_inf event; -1: none
  std::string nonfinite_evidence;          // what the first one was
  // The first loss_explosion alarm the Monitor raised live (an "alarm" event), which read every
  // step's loss; -1: none. A trace that keeps one record in 20 can miss a spike the live alarm saw.
  std::int64_t live_loss_alarm_step = -1;
  std::string live_loss_alarm;  // its evidence, as recorded

  std::size_t layer_slot(std::int64_t layer_index) const;  // position in `layers`
  const HeadBin& at(std::size_t layer, std::int64_t head, int bin) const {
    return head_bins[(layer * static_cast<std::size_t>(heads) + static_cast<std::size_t>(head)) * bins + bin];
  }
  const LayerBin& layer_at(std::size_t layer, int bin) const { return layer_bins[layer * bins + bin]; }
  std::int64_t bin_step(int bin) const;  // a representative step (first step seen, else bin start)
  double bin_fraction(int bin) const { return bins > 0 ? double(bin) / bins : 0.0; }
};

using Progress = std::function<void(double fraction)>;

// Throws InputError for unusable files or rank files that do not describe the same model.
// `workers`: processes that read in parallel (1: this process only; 0: this process below 2^18
// records, else 16, for reads in flight on a cold disk). Sums are added per worker and then across workers, so
// results with different worker counts agree to rounding, not bit for bit.
// `o_error`: also bin the O error sums (three more datasets to read; only the report plots them).
BinnedTrace bin_traces(const std::vector<std::string>& paths, int max_bins = 512, const Progress& progress = {},
                       int workers = 0, bool o_error = false);

}  // namespace lpdiag::analysis
