// Appends records to a trace (docs/reference/trace-format.md, version 1). Every group and dataset is created
// when the file opens; then the file switches to SWMR so readers can follow the run.
//
// Records are buffered and written every `flush_every` records, or once `flush_seconds` have
// passed since the last flush, whichever comes first (a live reader such as `lpdiag watch` then
// sees slow runs within seconds, not after minutes). A flush writes all datasets,
// flushes, and only then extends /step and flushes again: /step's length is the commit point,
// so a writer killed at any moment leaves a file whose records up to the last completed flush
// are all readable.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "lpdiag/trace/trace_layout.hpp"
#include "lpdiag/trace/trace_record.hpp"

namespace lpdiag {

struct TraceWriterOptions {
  int flush_every = 100;          // records between flushes (1 = every record)
  double flush_seconds = 10.0;    // also flush a record appended this long after the last flush (<= 0: never by time)
  int compression = 0;            // deflate level, 0 = none
  std::int64_t chunk_rows = 1024; // rows per HDF5 chunk
  bool swmr = true;               // switch to SWMR after creating the layout
  // On a write failure (disk full, size limit): false = report once, record an event if
  // possible, drop later records and keep training; true = throw WriteError from append/flush.
  bool stop_on_error = false;
  std::function<void(const std::string&)> on_error;  // default: one line on stderr
  // Write each flush on a thread of the writer's own: flush() hands the buffered rows over and
  // returns, and the caller goes on buffering the next ones (it waits only when the previous
  // flush has not finished). Every HDF5 call is then made on that thread. close() and sync()
  // wait until everything is on disk. A write failure is seen at the next append, flush or
  // close. The Monitor writes this way: its record() never waits for the disk.
  bool background_flush = false;
};

class TraceWriter {
 public:
  // Creates (truncates) `path`. Throws WriteError when it cannot, so a bad path fails at once.
  TraceWriter(const std::string& path, const TraceLayout& layout, const TraceHeader& header = {},
              const TraceWriterOptions& options = {});
  ~TraceWriter();  // flushes and closes; never throws
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Throws InvalidArgument when the record's shape does not match the layout or its step does
  // not increase: those are programming errors, not I/O failures.
  void append(const TraceRecord& record);
  void add_event(const TraceEvent& event);
  void flush();
  // flush(), then wait until the rows are on disk (the same as flush() without background_flush).
  void sync();
  void close();
  // Takes effect from the next append. Throws InvalidArgument when `records` < 1.
  void set_flush_every(int records);

  const TraceLayout& layout() const;
  const std::string& path() const;
  bool failed() const;
  const std::string& error() const;
  std::int64_t records_committed() const;  // rows of /step on disk
  std::int64_t records_dropped() const;    // appended after a failure

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lpdiag
