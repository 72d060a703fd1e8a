// One row of every time-series dataset: everything recorded at one training step. A record
// starts "unmeasured" (NaN / -1) and the recorder fills what it measured.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "lpdiag/trace/head_counters.hpp"
#include "lpdiag/trace/trace_layout.hpp"

namespace lpdiag {

struct WeightStats {
  double spectral_norm = std::numeric_limits<double>::quiet_NaN();
  double frobenius_norm = std::numeric_limits<double>::quiet_NaN();
  double stable_rank = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> head_spectral_norm;  // n_heads entries (NaN when unmeasured)
};

struct UpdateStats {
  double sigma1 = std::numeric_limits<double>::quiet_NaN();
  double concentration = std::numeric_limits<double>::quiet_NaN();
  double similarity_prev = std::numeric_limits<double>::quiet_NaN();
};

struct ActivationStats {
  float max_abs = std::numeric_limits<float>::quiet_NaN();
  float rms = std::numeric_limits<float>::quiet_NaN();
};

struct TraceRecord {
  std::int64_t step = 0;
  std::vector<double> scalars;                       // layout.scalars order
  std::vector<std::vector<HeadCounters>> attention;  // [layer][head], layout.attention order
  std::vector<WeightStats> weights;                  // layout.matrices order
  std::vector<UpdateStats> updates;                  // layout.matrices order
  std::vector<ActivationStats> activations;          // layout.activations order

  // A record of the right shape with nothing measured.
  static TraceRecord unmeasured(const TraceLayout& layout, std::int64_t step);
};

struct TraceEvent {
  std::int64_t step = 0;
  std::string kind;     // <= 31 bytes: nan_inf, capture_written, fix_engaged, writer_error, ...
  std::int32_t layer_index = -1;
  std::int32_t head = -1;
  double value = std::numeric_limits<double>::quiet_NaN();
  std::string message;  // <= 127 bytes; longer text is cut at a word and ends in "..." (fit_event_text)
};

}  // namespace lpdiag
