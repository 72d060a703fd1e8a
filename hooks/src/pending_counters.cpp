#include "pending_counters.hpp"

#include "lpdiag/hooks/counter_sink.hpp"
#ifdef LPDIAG_HOOKS_CUDA
#include "attention_cuda.hpp"
#endif

namespace lpdiag::hooks {
void add_heads(std::vector<HeadCounters>& into, const std::vector<HeadCounters>& from) {
  if (into.empty()) into = from;
  else
    for (std::size_t h = 0; h < from.size() && h < into.size(); ++h) into[h] += from[h];
}

namespace {
void merge(CountersByLayer& into, const CountersByLayer& from) {
  for (const auto& [layer, heads] : from) add_heads(into[layer], heads);
}
}  // namespace

PendingCounters PendingCounters::take(const torch::Device* async_device, std::int64_t lo, std::int64_t hi) {
  PendingCounters p;
  p.host = CounterSink::instance().drain_host(lo, hi);
#ifdef LPDIAG_HOOKS_CUDA
  for (auto& copy : copy_device_counters(lo, hi)) {
    if (async_device && copy.bytes.device() == *async_device && !p.device_bytes.defined()) {
      p.device_bytes = std::move(copy.bytes);
      p.device_layers = std::move(copy.layers);
    } else {
      merge(p.host, decode_device_counters(copy.layers, copy.bytes.cpu()));
    }
  }
#else
  (void)async_device;
#endif
  return p;
}

CountersByLayer PendingCounters::resolve(const torch::Tensor& host_bytes) const {
  CountersByLayer out = host;
#ifdef LPDIAG_HOOKS_CUDA
  if (device_bytes.defined()) merge(out, decode_device_counters(device_layers, host_bytes));
#else
  (void)host_bytes;
#endif
  return out;
}

}  // namespace lpdiag::hooks
