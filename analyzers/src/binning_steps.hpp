// The pieces bin_traces is made of, shared by the in-process and the forked paths:
// a plan (bin edges and layout, from the files' headers), binning one row range of one file into
// a BinnedTrace of the plan's shape, and adding two partial results of the same plan.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lpdiag/analyzers/binned_trace.hpp"
#include "lpdiag/trace/trace_reader.hpp"

namespace lpdiag::analysis::detail {

struct RowRange {
  std::size_t file = 0;  // index into BinnedTrace::files
  std::int64_t row0 = 0, row1 = 0;
};

// Empty bins for these files; throws InputError when rank files disagree about the model.
BinnedTrace plan_bins(const std::vector<std::string>& paths, const std::vector<TraceReader>& readers, int max_bins);

// Adds rows [range.row0, range.row1) of `reader` to `bt`; `rows_done(n)` after each block.
void bin_rows(const TraceReader& reader, const RowRange& range, BinnedTrace& bt,
              const std::function<void(std::int64_t)>& rows_done);

// bin_rows over ranges[begin, end), consecutive ranges of one file read as one.
void bin_ranges(const std::vector<TraceReader>& readers, const std::vector<RowRange>& ranges, std::size_t begin,
                std::size_t end, BinnedTrace& bt, const std::function<void(std::int64_t)>& rows_done);

// Adds `part` (binned with the same plan) into `into`.
void merge_bins(BinnedTrace& into, const BinnedTrace& part);
// Counts the files' nan_inf events into their bins and sets the run's first non-finite step.
void add_nonfinite_events(const std::vector<TraceReader>& readers, BinnedTrace& bt);
// Sets the run's first live loss_explosion alarm from the files' alarm events.
void add_live_loss_alarm(const std::vector<TraceReader>& readers, BinnedTrace& bt);

// Bins every range in `workers` child processes (HDF5 is built without thread safety, so the
// parallel readers are processes that inherit `readers`), then merges their results in worker
// order. Returns false, having done nothing, when the processes or their shared memory cannot
// be had; throws InputError with the worker's message when a worker fails.
bool bin_in_workers(const std::vector<TraceReader>& readers, const std::vector<RowRange>& ranges, int workers, BinnedTrace& bt,
                    const Progress& progress);

}  // namespace lpdiag::analysis::detail
