// The observer (lpdiag/observe/observer.hpp) on the device: the same quantities from bf16 or
// fp16 tensors that stay where the kernel left them, added into DeviceHeadCounters as lpdiag's own
// kernels add theirs (so the Monitor collects both alike). No CUDA or torch types cross this
// header; the stream is a cudaStream_t passed as void*.
#pragma once
#include <cstdint>

#include "lpdiag/cuda/flash_attention.hpp"
#include "lpdiag/observe/observer.hpp"

namespace lpdiag::cuda {

enum class ObservedType { bf16, fp16 };

// A (B, H, N, d) tensor on the device: element strides for b, h and n; d contiguous.
struct ObservedView {
  const void* ptr = nullptr;
  std::int64_t sb = 0, sh = 0, sn = 0;
};

struct ObserveForwardArgs {
  ObservedType type = ObservedType::bf16;
  ObservedView q, k, v, o;  // q, o: (B, Hq, Nq, d); k, v: (B, Hkv, Nk, d)
  ObservedCall shape;       // dimensions, causal, scale, batches, head_mask (its pointers unused)
  float* o_error = nullptr;             // (observed batches, Hq, Nq, d), contiguous; null: not kept
  DeviceHeadCounters* counters = nullptr;  // Hq entries, added to
  void* stream = nullptr;
};

struct ObserveBackwardArgs {
  ObservedType type = ObservedType::bf16;
  ObservedView dout;                    // (B, Hq, Nq, d): only the observed batches are read
  const float* o_error = nullptr;       // the forward's
  std::int64_t batches = 0, Hq = 0, Nq = 0, d = 0;
  std::uint64_t head_mask = 0;
  DeviceHeadCounters* counters = nullptr;
  void* stream = nullptr;
};

// Throw InvalidArgument for what the observer cannot take (check_observed_call's rules, head
// dim above 256, missing buffers).
void observe_forward(const ObserveForwardArgs& a);
void observe_backward(const ObserveBackwardArgs& a);

}  // namespace lpdiag::cuda
