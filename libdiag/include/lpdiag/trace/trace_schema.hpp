// The trace's schema in one table (docs/reference/trace-format.md): the paths of its groups and datasets,
// the names and element types of every series. The writer, the reader, the preflight and the
// analyzers all spell the layout through it, so none of them can disagree with another.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

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

// Per-head series under /attention/<layer>/, (rows, n_heads), one per HeadCounters field.
inline constexpr const char* kRows = "rows";
inline constexpr const char* kRepeatedMaxRows = "repeated_max_rows";
inline constexpr const char* kTileRepeatedMaxRows = "tile_repeated_max_rows";
inline constexpr const char* kZeroMaxRepeatedRows = "zero_max_repeated_rows";
inline constexpr const char* kPbarOneEntries = "pbar_one_entries";
inline constexpr const char* kFixEngagedRows = "fix_engaged_rows";
inline constexpr const char* kOErrCount = "o_err_count";
inline constexpr const char* kOErrPos = "o_err_pos";
inline constexpr const char* kOErrNeg = "o_err_neg";
inline constexpr const char* kOErrSum = "o_err_sum";
inline constexpr const char* kOErrSumsq = "o_err_sumsq";
inline constexpr const char* kDeltaErrCount = "delta_err_count";
inline constexpr const char* kDeltaErrPos = "delta_err_pos";
inline constexpr const char* kDeltaErrNeg = "delta_err_neg";
inline constexpr const char* kDeltaErrSum = "delta_err_sum";
inline constexpr const char* kDeltaErrSumsq = "delta_err_sumsq";
inline constexpr const char* kLogitMax = "logit_max";
inline constexpr HeadField kHeadFields[] = {
    {kRows, Elem::i64, offsetof(HeadCounters, rows)},
    {kRepeatedMaxRows, Elem::i64, offsetof(HeadCounters, repeated_max_rows)},
    {kTileRepeatedMaxRows, Elem::i64, offsetof(HeadCounters, tile_repeated_max_rows)},
    {kZeroMaxRepeatedRows, Elem::i64, offsetof(HeadCounters, zero_max_repeated_rows)},
    {kPbarOneEntries, Elem::i64, offsetof(HeadCounters, pbar_one_entries)},
    {kFixEngagedRows, Elem::i64, offsetof(HeadCounters, fix_engaged_rows)},
    {kOErrCount, Elem::i64, offsetof(HeadCounters, o_err_count)},
    {kOErrPos, Elem::i64, offsetof(HeadCounters, o_err_pos)},
    {kOErrNeg, Elem::i64, offsetof(HeadCounters, o_err_neg)},
    {kOErrSum, Elem::f64, offsetof(HeadCounters, o_err_sum)},
    {kOErrSumsq, Elem::f64, offsetof(HeadCounters, o_err_sumsq)},
    {kDeltaErrCount, Elem::i64, offsetof(HeadCounters, delta_err_count)},
    {kDeltaErrPos, Elem::i64, offsetof(HeadCounters, delta_err_pos)},
    {kDeltaErrNeg, Elem::i64, offsetof(HeadCounters, delta_err_neg)},
    {kDeltaErrSum, Elem::f64, offsetof(HeadCounters, delta_err_sum)},
    {kDeltaErrSumsq, Elem::f64, offsetof(HeadCounters, delta_err_sumsq)},
    {kLogitMax, Elem::f32, offsetof(HeadCounters, logit_max)},
};

// Per-matrix series under /weights/<matrix>/ and /updates/<matrix>/, per-activation series under
// /activations/<name>/.
inline constexpr const char* kSpectralNorm = "spectral_norm";
inline constexpr const char* kFrobeniusNorm = "frobenius_norm";
inline constexpr const char* kStableRank = "stable_rank";
inline constexpr const char* kHeadSpectralNorm = "head_spectral_norm";  // (rows, n_heads), head-sliced attn_q / attn_k only
inline constexpr const char* kSigma1 = "sigma1";
inline constexpr const char* kConcentration = "concentration";
inline constexpr const char* kSimilarityPrev = "similarity_prev";
inline constexpr const char* kMaxAbs = "max_abs";
inline constexpr const char* kRms = "rms";
inline constexpr const char* kWeightSeries[] = {kSpectralNorm, kFrobeniusNorm, kStableRank};
inline constexpr const char* kUpdateSeries[] = {kSigma1, kConcentration, kSimilarityPrev};
inline constexpr const char* kActivationSeries[] = {kMaxAbs, kRms};

// Paths. Groups end in '/', so a series is group + name.
inline constexpr const char* kStepPath = "/step";
inline constexpr const char* kEventsPath = "/events";
inline constexpr const char* kScalars = "/scalars";
inline constexpr const char* kAttention = "/attention";
inline constexpr const char* kWeights = "/weights";
inline constexpr const char* kUpdates = "/updates";
inline constexpr const char* kActivations = "/activations";
inline std::string scalar_path(const std::string& name) { return std::string(kScalars) + "/" + name; }
inline std::string attention_group(const std::string& layer) { return std::string(kAttention) + "/" + layer + "/"; }
inline std::string weight_group(const std::string& matrix) { return std::string(kWeights) + "/" + matrix + "/"; }
inline std::string update_group(const std::string& matrix) { return std::string(kUpdates) + "/" + matrix + "/"; }
inline std::string activation_group(const std::string& name) { return std::string(kActivations) + "/" + name + "/"; }
// The group itself, for creating or opening it: "/attention/h.0.attn/" -> "/attention/h.0.attn".
inline std::string group_path(const std::string& group) { return group.substr(0, group.size() - 1); }

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
