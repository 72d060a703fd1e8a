// The online alarm: one causal detector, fed one record at a time, that warns while a run can
// still be saved and flags the failures that come without warning as they happen. The same
// detector runs in `lpdiag watch`, in the Monitor (on_alarm, guard) and in `lpdiag alarm`, which
// replays a finished trace record by record. It never looks ahead: an alarm at step t is decided
// by the records up to t.
//
// What it raises (docs/reference/analyzers.md, "The online alarm"):
//  - growth (a precursor): a head's W_Q slice grows faster than its peers once the heads have
//    settled, while its repeated-maximum rows rise. The mechanism's own signature before the loss
//    explodes; it needs the attention counters (lpdiag's kernels or the observer) and per-head
//    spectral norms in the trace.
//  - logit_collapse: a head's max logit jumps to one-hot levels within a short window.
//  - loss_explosion: the loss's running median doubles its best.
//  - non_finite: a non-finite loss, or a nan_inf event.
// Each layer raises each kind once (a collapse early in training does not silence the growth
// precursor later); each run-level kind once.
#pragma once
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lpdiag::alarm {

struct AlarmParams {
  // growth: log sigma_1 of a head's W_Q slice over the last `window` steps, less the median
  // head's, at least `excess_growth`, while the median head grew at most `settled_growth`; the
  // head's repeated-maximum rate over the last window at least `trigger_ratio` times, and
  // `trigger_rise` above, its rate over the window before. With `trigger_odds`, `trigger_ratio`
  // compares the rates' odds (rows with a repeated maximum over rows without) instead: the same
  // at low rates, and a head already at half its rows can still double its odds (50% to 67%)
  // where it cannot double its rate.
  double window = 500;
  double settled_growth = 0.15;
  double excess_growth = 0.25;
  double trigger_ratio = 2.0;
  double trigger_rise = 0.02;
  bool trigger_odds = false;
  // logit_collapse: a max logit >= collapse_level and >= collapse_ratio times the head's lowest
  // over the last collapse_window steps.
  double collapse_window = 100;
  double collapse_level = 100;
  double collapse_ratio = 30;
  // loss_explosion: the median of the last 5 finite losses >= loss_factor x the best such median.
  double loss_factor = 2;

  // The values the product uses, fitted leave-one-run-out on the trace corpus
  // (docs/results/alarm.md) and frozen.
  static AlarmParams frozen();
  // The thresholds a user can choose by name (kAlarmPresets): "default" is frozen();
  // "slow-trigger" is the first frozen fit (excess growth 0.35, repeated-maximum ratio 1.5, settled
  // growth 0.1), which also warns when a growing head's repeated maxima rise slowly;
  // "odds-trigger" is frozen() with trigger_odds, which also warns when a growing head's repeated
  // maxima were already common. nullopt for any other name.
  static std::optional<AlarmParams> preset(std::string_view name);
};

// The names AlarmParams::preset() knows, for help texts and error messages.
inline constexpr const char* kAlarmPresets[] = {"default", "slow-trigger", "odds-trigger"};
// {"default", "slow-trigger", "odds-trigger"}: for option checks and the Python op that lists them.
std::vector<std::string> alarm_preset_names();
// "default, slow-trigger, odds-trigger"
std::string alarm_preset_list();

inline constexpr double kUnmeasured = std::numeric_limits<double>::quiet_NaN();

// One (layer, head) in one record; NaN (or rows < 0) where the record did not measure it.
struct HeadSample {
  double rows = kUnmeasured, repeated = kUnmeasured;
  double logit_max = kUnmeasured;
  double sigma = kUnmeasured;  // sigma_1 of the head's W_Q slice
};

struct AlarmRecord {
  std::int64_t step = 0;
  double loss = kUnmeasured;         // NaN: not measured; +-Inf: computed and not finite
  bool nonfinite_event = false;      // a nan_inf event at this step
  std::vector<std::int64_t> layers;  // layer_index of each attention layer
  std::int64_t heads = 0;            // heads per layer (the widest layer)
  std::vector<HeadSample> samples;   // [layer slot][head]
  HeadSample& at(std::size_t slot, std::int64_t h) { return samples[slot * static_cast<std::size_t>(heads) + static_cast<std::size_t>(h)]; }
  const HeadSample& at(std::size_t slot, std::int64_t h) const {
    return samples[slot * static_cast<std::size_t>(heads) + static_cast<std::size_t>(h)];
  }
};

struct Alarm {
  std::int64_t step = -1;
  std::string kind;              // growth, logit_collapse, loss_explosion, non_finite
  std::int64_t layer_index = -1;  // -1: the run as a whole
  std::int64_t head = -1;         // -1: none
  std::string evidence;
};

// What the detector reads, after each record, for a user's own dashboard: the quantities its rules
// compare with their thresholds, so a run can be followed before (and whether or not) they fire.
// NaN where the records have not measured it yet.
struct LayerReading {
  std::int64_t layer_index = -1;
  // The head whose log sigma_1 (W_Q slice) grew most beyond the median head's over the last window
  // (the growth rule's excess_growth), and that head's repeated-maximum rate (repeated-maximum rows
  // over rows) in the last window and in the one before (the rule's trigger_ratio compares them).
  // Updated on the records that carry sigma_1 (the weights cadence).
  std::int64_t head = -1;
  double excess_growth = kUnmeasured;
  double repeated_rate = kUnmeasured;
  double repeated_rate_before = kUnmeasured;
  // The largest max attention logit over the layer's heads in the latest record that measured it
  // (the collapse rule's level).
  double logit_max = kUnmeasured;
};

struct Readings {
  std::int64_t step = -1;              // the latest record fed
  double loss_over_best = kUnmeasured;  // the loss's running median over its best (loss rule: loss_factor)
  double median_growth = kUnmeasured;   // the median head's log sigma_1 growth over the window (settled_growth)
  std::vector<LayerReading> layers;     // one per attention layer, in the records' order
};

class AlarmDetector {
 public:
  explicit AlarmDetector(AlarmParams p = AlarmParams::frozen());
  // Records must come in increasing step order (a repeated or earlier step is ignored). Returns
  // the alarms this record raised (usually none).
  std::vector<Alarm> feed(const AlarmRecord& r);
  const std::vector<Alarm>& alarms() const { return alarms_; }
  const AlarmParams& params() const { return p_; }
  const Readings& readings() const { return readings_; }

 private:
  struct Point {
    std::int64_t step;
    double value;
  };
  struct Counts {
    std::int64_t step;
    double rows, repeated;
  };
  struct HeadHistory {
    std::deque<Point> sigma, logit;
    std::deque<Counts> counts;
  };
  void check_growth(const AlarmRecord& r, std::vector<Alarm>& out);
  void check_collapse(const AlarmRecord& r, std::vector<Alarm>& out);
  void check_loss(const AlarmRecord& r, std::vector<Alarm>& out);
  HeadHistory& history(std::int64_t layer, std::int64_t head);
  bool layer_alarmed(std::int64_t layer, std::string_view kind) const;
  void raise(Alarm a, std::vector<Alarm>& out);
  // A head's repeated-maximum rate over the window ending at `step` and over the window before it
  // (NaN where the window holds no counters).
  std::pair<double, double> repeated_rates(std::int64_t layer, std::int64_t head, std::int64_t step);
  // Whether a repeated-maximum rate rose by trigger_ratio from `before` to `recent` (as a rate, or
  // as odds with trigger_odds).
  bool rose(double recent, double before) const;

  AlarmParams p_;
  std::int64_t last_step_ = std::numeric_limits<std::int64_t>::min();
  std::vector<std::int64_t> layers_;
  std::int64_t heads_ = 0;
  std::vector<HeadHistory> hist_;
  std::deque<double> recent_loss_;
  double best_loss_median_ = std::numeric_limits<double>::infinity();
  bool nonfinite_raised_ = false, loss_raised_ = false;
  std::vector<Alarm> alarms_;
  Readings readings_;
};

}  // namespace lpdiag::alarm
