// Change points on per-bin series under background drift (private to the analyzers).
//
// Real runs drift: sigma_1 and the logits grow in healthy training, rates wander. A fixed
// baseline (the first fifth of the run) then places every onset at the start, and it misses
// events inside the baseline itself. Instead each series is fitted by least squares with a drift
// line plus one change at bin tau, every tau tried:
//   step:  x = a + s b + D [b >= tau]             (a rate or a similarity that jumps)
//   hinge: x = a + s b + c max(0, b - tau)        (a log norm that starts to grow faster)
// The drift s absorbs the background, so the change is measured against it. Heavy tails are
// handled by fitting a running median, noise is read off the first differences (which a slow
// drift does not inflate), and the onset is walked back from tau to where the series first
// leaves the pre-change trend, so a ramp of any shape starts where it starts.
#pragma once
#include <vector>

namespace lpdiag::analysis::cp {

struct Fit {
  bool ok = false;
  int tau = -1;           // first bin of the changed regime
  double a = 0, s = 0;    // pre-change trend a + s b
  double change = 0;      // step / ramp: D; hinge: c (per bin)
  int width = 0;          // ramp: bins from tau to the full change (0: a step); -1: a hinge
  double sse = 0;         // residual sum of squares of the best fit
  double sse_null = 0;    // residual sum of squares of the drift line alone
  int n = 0;              // bins with data
  int bins = 0;           // bins of the series, with data or not
};

// Running median of the finite values in [b - w, b + w]; NaN where there are none.
std::vector<double> running_median(const std::vector<double>& x, int w);
// Robust per-bin noise s.d. from the first differences of consecutive finite values.
double diff_noise_sd(const std::vector<double>& x);
// Best of a step, linear ramps of K/50, K/20, K/10, K/5 and K/3 bins, and a hinge (growth that does
// not level off): x = a + s b + D r((b - tau) / w), with at least `min_pre` bins of data before
// tau and `min_post` from it. A ramp's tau is where it starts.
// drift = false: no drift term (a series whose background is already removed); sign: only
// changes of that sign (+1 rises, -1 falls, 0 either).
Fit fit_ramp(const std::vector<double>& x, int min_pre, int min_post, bool drift = true, double sign = 0);
// The model's change at bin b over the pre-change trend.
double effect_at(const Fit& f, int b);
// The change the model reaches by the series' last bin: a step's whole change; a ramp's share of
// its change that fits before the end (a ramp fitted to the last few bins may be far from done);
// a hinge's rise at the last bin.
double step_effect(const Fit& f);
// Walks back from f.tau to the first bin from which `x` (smoothed) stays at least `margin`
// beyond the pre-change trend in the direction `sign` (+1 rise, -1 fall), up to tau.
int walk_back_onset(const std::vector<double>& x, const Fit& f, double margin, double sign);
// A ramp's fitted start can lie before the series leaves its trend: a least-squares line through
// a rise in stages (a rate that steps up a little, then more, then drifts on up through a loss
// explosion) starts where none of the stages has begun. Where the series at f.tau is not yet
// `margin` beyond the trend, the first bin of the ramp from which it is, and is at the next bin
// with data; f.tau where there is none, or for a step or a hinge.
int departure_within_ramp(const std::vector<double>& x, const Fit& f, double margin, double sign);

// A sustained rise of a rate-like series (no drift term): a step or ramp up of at least
// max(noise_sds noise s.d., min_change), with >= 70% of the bins after it above half the fitted
// change; onset walked back to where the series leaves its level (or, for a ramp fitted to start
// before it does, forward to there: departure_within_ramp). With `on_mean`, the noise is
// that of the mean level after the change (the bin noise over the root of the bins from the fitted
// change to the end): for per-record statistics whose bins scatter widely around a level that
// moves clearly (a singular-vector similarity: bin noise ~0.1 on the H200 runs).
struct Rise {
  bool ok = false;
  int onset = -1;
  double before = 0, after = 0;  // the level at the onset, the mean from the change on
  double d = 0, margin = 0, noise = 0;
};
Rise sustained_rise(const std::vector<double>& x, double noise_sds, double min_change, bool on_mean = false);
// The bins a sustained rise needs after its change to be read, of a series of K bins (4%, at
// least 3): a step up that begins later than that before the series' end cannot be found.
int min_bins_after_change(int K);

}  // namespace lpdiag::analysis::cp
