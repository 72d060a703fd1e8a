// Feeds a trace's records to the alarm detector in step order, reading in blocks: once over a
// finished trace (`lpdiag alarm`), or again after each refresh of a live one (`lpdiag watch`),
// from where the last call stopped.
#pragma once
#include <cstdint>
#include <vector>

#include "lpdiag/alarm/alarm_detector.hpp"
#include "lpdiag/trace/trace_reader.hpp"
#include "lpdiag/trace/trace_record.hpp"

namespace lpdiag::alarm {

// One record as a writer holds it (the Monitor's), for the detector: the loss (a non-finite one
// as a non-finite value), the counters of each attention layer and sigma_1 of each head-sliced W_Q.
AlarmRecord alarm_record(const TraceLayout& layout, const TraceRecord& r);

class TraceFeeder {
 public:
  // `start_row`: the first record to read (a live trace reopened after `start_row` were fed).
  explicit TraceFeeder(const TraceReader& reader, std::int64_t start_row = 0);
  // Feeds records [fed(), reader.records()) to `det`; returns the alarms they raised.
  std::vector<Alarm> feed_new(AlarmDetector& det);
  // The same records, returned instead of fed (to run several detectors over one read).
  std::vector<AlarmRecord> read_new();
  std::int64_t fed() const { return next_; }
  // What the trace lets the detector see: the growth precursor needs both.
  bool has_counters() const { return has_counters_; }
  bool has_head_sigma() const { return !qs_.empty(); }

 private:
  struct Q {
    std::string path;  // .../head_spectral_norm
    std::size_t slot;
    std::int64_t heads;
  };
  const TraceReader& r_;
  std::int64_t next_ = 0;
  std::vector<std::int64_t> layers_;
  std::vector<std::string> groups_;
  std::vector<std::int64_t> layer_heads_;
  std::int64_t heads_ = 0;
  std::vector<Q> qs_;
  std::vector<std::int64_t> nonfinite_steps_;
  std::int64_t events_seen_ = -1;
  bool has_counters_ = false;
};

}  // namespace lpdiag::alarm
