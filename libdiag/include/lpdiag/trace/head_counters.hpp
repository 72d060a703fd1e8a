// The per-(step, layer, head) attention signals of docs/reference/trace-format.md's /attention group, as one
// mergeable struct. The attention engine fills it; the trace stores one dataset per field.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>

namespace lpdiag {

struct HeadCounters {
  std::int64_t rows = 0;
  std::int64_t repeated_max_rows = 0;
  std::int64_t tile_repeated_max_rows = 0;
  std::int64_t zero_max_repeated_rows = 0;
  std::int64_t pbar_one_entries = 0;
  std::int64_t fix_engaged_rows = 0;
  std::int64_t o_err_count = 0, o_err_pos = 0, o_err_neg = 0;
  double o_err_sum = 0.0, o_err_sumsq = 0.0;
  std::int64_t delta_err_count = 0, delta_err_pos = 0, delta_err_neg = 0;
  double delta_err_sum = 0.0, delta_err_sumsq = 0.0;
  float logit_max = -std::numeric_limits<float>::infinity();

  // The trace's "not measured in this record": -1 for integers, NaN for floats.
  static HeadCounters unmeasured();
  bool measured() const { return rows >= 0; }

  // Sums of two disjoint parts (batches, threads, micro-steps) of one step.
  HeadCounters& operator+=(const HeadCounters& o) {
    rows += o.rows;
    repeated_max_rows += o.repeated_max_rows;
    tile_repeated_max_rows += o.tile_repeated_max_rows;
    zero_max_repeated_rows += o.zero_max_repeated_rows;
    pbar_one_entries += o.pbar_one_entries;
    fix_engaged_rows += o.fix_engaged_rows;
    o_err_count += o.o_err_count;
    o_err_pos += o.o_err_pos;
    o_err_neg += o.o_err_neg;
    o_err_sum += o.o_err_sum;
    o_err_sumsq += o.o_err_sumsq;
    delta_err_count += o.delta_err_count;
    delta_err_pos += o.delta_err_pos;
    delta_err_neg += o.delta_err_neg;
    delta_err_sum += o.delta_err_sum;
    delta_err_sumsq += o.delta_err_sumsq;
    logit_max = std::max(logit_max, o.logit_max);
    return *this;
  }
};

inline HeadCounters HeadCounters::unmeasured() {
  HeadCounters c;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  c.rows = c.repeated_max_rows = c.tile_repeated_max_rows = c.zero_max_repeated_rows = -1;
  c.pbar_one_entries = c.fix_engaged_rows = -1;
  c.o_err_count = c.o_err_pos = c.o_err_neg = -1;
  c.delta_err_count = c.delta_err_pos = c.delta_err_neg = -1;
  c.o_err_sum = c.o_err_sumsq = c.delta_err_sum = c.delta_err_sumsq = nan;
  c.logit_max = std::numeric_limits<float>::quiet_NaN();
  return c;
}

}  // namespace lpdiag
