// The attention counters of one record, taken without waiting for the device: those of calls on
// the CPU are known at once; those of calls on CUDA are snapshotted on the device (a copy on the
// training stream, then the accumulators are cleared) and read once the copy reached the host.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "lpdiag/trace/head_counters.hpp"

namespace lpdiag::hooks {

using CountersByLayer = std::map<std::int64_t, std::vector<HeadCounters>>;

// Adds one call's per-head counters to a layer's (which takes them whole while empty).
void add_heads(std::vector<HeadCounters>& into, const std::vector<HeadCounters>& from);

struct PendingCounters {
  CountersByLayer host;                                    // known now
  torch::Tensor device_bytes;                              // raw device counters, undefined if none
  std::vector<std::pair<std::int64_t, std::int64_t>> device_layers;  // (layer, heads), in byte order

  // Drains the CounterSink. Counters on `async_device` stay on the device as device_bytes;
  // those on any other device (or all, when async_device is null) are copied now, which waits.
  // Only layer ids in [lo, hi): the calling Monitor's session.
  static PendingCounters take(const torch::Device* async_device, std::int64_t lo = 0,
                              std::int64_t hi = std::numeric_limits<std::int64_t>::max());
  // Everything by layer, given device_bytes copied to the host (ignored when none were pending).
  CountersByLayer resolve(const torch::Tensor& host_bytes) const;
};

}  // namespace lpdiag::hooks
