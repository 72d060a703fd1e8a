// The CUDA path of lpdiag::attention: torch tensors in, the libdiag CUDA entries on the current
// stream, counters accumulated on the device until the Monitor drains them (one copy per
// recorded step, not one per call). Built only against a CUDA LibTorch with the kernels.
#pragma once
#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lpdiag/attention/attention_spec.hpp"
#include "lpdiag/hooks/flash_tensors.hpp"
#include "lpdiag/trace/head_counters.hpp"

namespace lpdiag::hooks {

// Returns O, L and (at "full") the residual, which the backward needs again.
FlashForwardTensors cuda_attention_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const AttentionSpec& spec, int64_t layer);

// Returns dq, dk, dv.
std::vector<torch::Tensor> cuda_attention_backward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                                   const FlashForwardTensors& fwd, const torch::Tensor& dout,
                                                   const AttentionSpec& spec, int64_t layer);

// Layer `layer`'s device counters (H entries on like's device, added to until the Monitor
// drains them); layer < 0: a zeroed scratch buffer held by `scratch`, which nobody reads.
lc::DeviceHeadCounters* device_counters_for(std::int64_t layer, std::int64_t H, const torch::Tensor& like, torch::Tensor& scratch);

// Every layer's device counters, one copy per device made on the current stream, after which
// the accumulators are cleared (ordered after the copy). `bytes` holds H DeviceHeadCounters per
// layer, in the order of `layers` (layer, H); a layer with no call since the last copy is absent
// after decoding.
struct DeviceCounterCopy {
  torch::Tensor bytes;
  std::vector<std::pair<std::int64_t, std::int64_t>> layers;
};
// Only the layers with ids in [lo, hi) (a Monitor's session, counter_sink.hpp).
std::vector<DeviceCounterCopy> copy_device_counters(std::int64_t lo, std::int64_t hi);
// Reads `bytes` of a DeviceCounterCopy once on the host (uint8, same size).
std::map<std::int64_t, std::vector<HeadCounters>> decode_device_counters(
    const std::vector<std::pair<std::int64_t, std::int64_t>>& layers, const torch::Tensor& host_bytes);

}  // namespace lpdiag::hooks
