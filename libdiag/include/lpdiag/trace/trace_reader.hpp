// Typed, validating access to a trace. Opening checks the whole contract of docs/reference/trace-format.md
// (format, version, every dataset's type and length) and throws InputError with one line that
// names the file and the problem. Reads are by row range, so nothing loads a whole dataset
// unless the caller asks for every row.
//
// The record count is the length of /step (the writer's commit point); longer datasets are a
// flush the writer did not finish and their extra rows are ignored.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lpdiag/trace/trace_layout.hpp"
#include "lpdiag/trace/trace_record.hpp"

namespace lpdiag {

struct TraceMeta {
  std::string format;
  std::int64_t version = 0;
  std::string producer;
  std::string created_utc;
  std::string run_config;
  std::int64_t rank = 0;
  std::int64_t world_size = 1;
};

class TraceReader {
 public:
  // Opens read-only; falls back to SWMR read for a file a writer holds (or held when it died).
  explicit TraceReader(const std::string& path);
  ~TraceReader();
  TraceReader(TraceReader&&) noexcept;
  TraceReader& operator=(TraceReader&&) noexcept;

  const std::string& path() const;
  const TraceMeta& meta() const;
  const TraceLayout& layout() const;
  bool live() const;  // opened in SWMR read mode
  // Tells the kernel that reads will skip around the file (no read-ahead). A reader that uses a
  // few of many datasets then reads only their chunks instead of the neighbours' too. A hint:
  // returns false where it could not be given, and nothing else changes.
  bool hint_sparse_reads() const;

  std::int64_t records() const;
  // Re-reads the committed length of a live trace; returns the new record count.
  std::int64_t refresh();

  std::vector<std::int64_t> steps(std::int64_t row0, std::int64_t n) const;
  // Any numeric series by path ("/scalars/loss", "/weights/blk2.q/head_spectral_norm"), rows
  // [row0, row0 + n), row-major with `width()` values per row; integers convert to double.
  std::vector<double> series(const std::string& path, std::int64_t row0, std::int64_t n) const;
  // The same rows into `out`, whose storage is reused: a loop over blocks allocates once.
  void read_series(const std::string& path, std::int64_t row0, std::int64_t n, std::vector<double>& out) const;
  // An integer series (a counter) as stored, without conversion; InvalidArgument for other types.
  void read_counts(const std::string& path, std::int64_t row0, std::int64_t n, std::vector<std::int64_t>& out) const;
  std::int64_t width(const std::string& path) const;
  bool has_series(const std::string& path) const;

  // Attention layers and matrices as the trace declares them.
  const AttentionLayerSpec* attention_layer(std::int64_t layer_index) const;
  std::vector<const MatrixSpec*> matrices(const std::string& role) const;
  // Counters of one attention layer: n records x n_heads, row-major.
  std::vector<HeadCounters> attention(std::int64_t layer_index, std::int64_t row0, std::int64_t n) const;

  std::vector<TraceEvent> events() const;
  std::int64_t event_count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lpdiag
