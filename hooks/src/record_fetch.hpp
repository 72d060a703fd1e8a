// What a record still waits for: device scalars bound for its fields, and the attention counters
// of the calls since the last record. The Monitor copies everything to the host at once: on a
// side stream without waiting (CUDA weights), or in line.
#pragma once
#include <torch/torch.h>

#include <cstddef>
#include <vector>

#include "lpdiag/trace/trace_record.hpp"
#include "pending_counters.hpp"

namespace lpdiag::hooks {

struct RecordFetch {
  struct Dst {
    double* d = nullptr;
    float* f = nullptr;
    double scale = 1;  // the field gets value * scale
  };
  std::vector<torch::Tensor> values;
  std::vector<Dst> dst;
  PendingCounters counters;
  bool counters_due = false;  // the attention signal is due: the counters go into the record
  // A replayed graph's values land in its template record; these parts of it are then copied.
  const TraceRecord* from_template = nullptr;
  bool template_weights = false, template_updates = false;

  // t holds one value per destination, in order.
  void add(const torch::Tensor& t, double* d) { add(t, std::vector<double*>{d}); }
  void add(const torch::Tensor& t, const std::vector<double*>& d);
  void add(const torch::Tensor& t, const std::vector<float*>& d);
  void add(const torch::Tensor& t, const std::vector<Dst>& d);
  // The device tensors to copy: the values in one fp64 vector (widened once; the statistics are
  // fp32 computations), then the raw counters.
  std::vector<torch::Tensor> parts() const;
  std::size_t parts_count() const;
  // Given parts() on the host: fills the fields and returns the counters by layer.
  CountersByLayer land(const std::vector<torch::Tensor>& host);
  // parts() copied here, one at a time, each waiting for the device; then land().
  CountersByLayer land_in_line();
};

}  // namespace lpdiag::hooks
