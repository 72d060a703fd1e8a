// The device counters' host side: clearing, reading back, and decoding into HeadCounters.
#include <cuda_runtime.h>

#include <cstring>
#include <limits>

#include "lpdiag/cuda/cuda_check.hpp"
#include "lpdiag/cuda/flash_attention.hpp"

namespace lpdiag::cuda {

HeadCounters to_head_counters(const DeviceHeadCounters& c) {
  HeadCounters h;
  h.rows = static_cast<std::int64_t>(c.rows);
  h.repeated_max_rows = static_cast<std::int64_t>(c.repeated_max_rows);
  h.tile_repeated_max_rows = static_cast<std::int64_t>(c.tile_repeated_max_rows);
  h.zero_max_repeated_rows = static_cast<std::int64_t>(c.zero_max_repeated_rows);
  h.pbar_one_entries = static_cast<std::int64_t>(c.pbar_one_entries);
  h.fix_engaged_rows = static_cast<std::int64_t>(c.fix_engaged_rows);
  h.o_err_count = static_cast<std::int64_t>(c.o_err_count);
  h.o_err_pos = static_cast<std::int64_t>(c.o_err_pos);
  h.o_err_neg = static_cast<std::int64_t>(c.o_err_neg);
  h.o_err_sum = c.o_err_sum;
  h.o_err_sumsq = c.o_err_sumsq;
  h.delta_err_count = static_cast<std::int64_t>(c.delta_err_count);
  h.delta_err_pos = static_cast<std::int64_t>(c.delta_err_pos);
  h.delta_err_neg = static_cast<std::int64_t>(c.delta_err_neg);
  h.delta_err_sum = c.delta_err_sum;
  h.delta_err_sumsq = c.delta_err_sumsq;
  if (c.logit_max_key == 0) {
    h.logit_max = -std::numeric_limits<float>::infinity();
  } else {
    const unsigned int k = c.logit_max_key;
    const unsigned int u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    std::memcpy(&h.logit_max, &u, sizeof u);
  }
  return h;
}

void clear_counters(DeviceHeadCounters* dev, std::int64_t heads, void* stream) {
  LPDIAG_CUDA_CHECK(cudaMemsetAsync(dev, 0, static_cast<std::size_t>(heads) * sizeof(DeviceHeadCounters),
                                    static_cast<cudaStream_t>(stream)));
}

std::vector<HeadCounters> read_counters(const DeviceHeadCounters* dev, std::int64_t heads, void* stream) {
  std::vector<DeviceHeadCounters> raw(static_cast<std::size_t>(heads));
  auto* s = static_cast<cudaStream_t>(stream);
  LPDIAG_CUDA_CHECK(cudaMemcpyAsync(raw.data(), dev, raw.size() * sizeof(DeviceHeadCounters), cudaMemcpyDeviceToHost, s));
  LPDIAG_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<HeadCounters> out;
  out.reserve(raw.size());
  for (const auto& r : raw) out.push_back(to_head_counters(r));
  return out;
}

}  // namespace lpdiag::cuda
