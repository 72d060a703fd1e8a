// Names and element types of the trace's datasets, shared by writer and reader so the two can
// never disagree. Private to libdiag.
#pragma once
#include <cstddef>
#include <cstdint>

#include "lpdiag/trace/head_counters.hpp"

namespace lpdiag::schema {

inline constexpr const char* kFormat = "lpdiag-trace";
inline constexpr const char* kCaptureFormat = "lpdiag-capture";
inline constexpr std::int64_t kVersion = 1;

enum class Elem { i64, f64, f32 };

struct HeadField {
  const char* name;
  Elem elem;
  std::size_t offset;  // into HeadCounters
};

#define LPDIAG_HF(field, elem) HeadField{#field, Elem::elem, offsetof(HeadCounters, field)}
inline constexpr HeadField kHeadFields[] = {
    LPDIAG_HF(rows, i64),
    LPDIAG_HF(repeated_max_rows, i64),
    LPDIAG_HF(tile_repeated_max_rows, i64),
    LPDIAG_HF(zero_max_repeated_rows, i64),
    LPDIAG_HF(pbar_one_entries, i64),
    LPDIAG_HF(fix_engaged_rows, i64),
    LPDIAG_HF(o_err_count, i64),
    LPDIAG_HF(o_err_pos, i64),
    LPDIAG_HF(o_err_neg, i64),
    LPDIAG_HF(o_err_sum, f64),
    LPDIAG_HF(o_err_sumsq, f64),
    LPDIAG_HF(delta_err_count, i64),
    LPDIAG_HF(delta_err_pos, i64),
    LPDIAG_HF(delta_err_neg, i64),
    LPDIAG_HF(delta_err_sum, f64),
    LPDIAG_HF(delta_err_sumsq, f64),
    LPDIAG_HF(logit_max, f32),
};
#undef LPDIAG_HF

inline constexpr const char* kWeightSeries[] = {"spectral_norm", "frobenius_norm", "stable_rank"};
inline constexpr const char* kUpdateSeries[] = {"sigma1", "concentration", "similarity_prev"};
inline constexpr const char* kActivationSeries[] = {"max_abs", "rms"};

inline std::size_t elem_size(Elem e) { return e == Elem::f32 ? 4 : 8; }

// /events compound member sizes.
inline constexpr std::size_t kEventKindLen = 32;
inline constexpr std::size_t kEventMessageLen = 128;

struct EventRow {
  std::int64_t step;
  char kind[kEventKindLen];
  std::int32_t layer_index;
  std::int32_t head;
  double value;
  char message[kEventMessageLen];
};

}  // namespace lpdiag::schema
