// The fp32 policy's launchers (fp32/fp32_kernels.cuh): the forward; the backward's delta
// (recomputing O), then dK/dV and dQ (independent of each other), on the caller's stream.
#include <cuda_runtime.h>

#include <cmath>

#include "fp32/fp32_kernels.cuh"
#include "lpdiag/cuda/cuda_check.hpp"
#include "seed/seed_launch.hpp"

namespace lpdiag::cuda {
namespace {

template <class Kernel, class Params>
void launch(Kernel kernel, int smem, const Params& p, int B, cudaStream_t s) {
  flash::allow_shared_memory(kernel, smem);
  kernel<<<dim3((p.N + seed::kChunk - 1) / seed::kChunk, B * p.H), seed::kChunk, smem, s>>>(p);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
}

template <int D, bool Causal>
void forward_by_level(const seed::FwdParams& p, int B, Instrument level, cudaStream_t s) {
  constexpr int smem = fp32::fwd_smem_bytes<D>();
  switch (level) {
    case Instrument::off: return launch(fp32::fp32_fwd_kernel<D, Causal, 0>, smem, p, B, s);
    case Instrument::counters: return launch(fp32::fp32_fwd_kernel<D, Causal, 1>, smem, p, B, s);
    case Instrument::full: return launch(fp32::fp32_fwd_kernel<D, Causal, 2>, smem, p, B, s);
  }
}

template <int D, bool Causal>
void backward_all(const seed::BwdParams& p, int B, bool full, cudaStream_t s) {
  if (full) launch(fp32::fp32_delta_kernel<D, Causal, 2>, fp32::fwd_smem_bytes<D>(), p, B, s);
  else launch(fp32::fp32_delta_kernel<D, Causal, 0>, fp32::fwd_smem_bytes<D>(), p, B, s);
  launch(fp32::fp32_dkdv_kernel<D, Causal>, fp32::dkdv_smem_bytes<D>(), p, B, s);
  launch(fp32::fp32_dq_kernel<D, Causal>, fp32::dq_smem_bytes<D>(), p, B, s);
}

}  // namespace

void fp32_forward(const FlashForwardArgs& a) {
  const seed::FwdParams p = seed::forward_params(a);
  auto* s = static_cast<cudaStream_t>(a.stream);
  const int B = static_cast<int>(a.shape.B);
  if (a.shape.d == 64)
    a.shape.causal ? forward_by_level<64, true>(p, B, a.instrument, s) : forward_by_level<64, false>(p, B, a.instrument, s);
  else a.shape.causal ? forward_by_level<128, true>(p, B, a.instrument, s) : forward_by_level<128, false>(p, B, a.instrument, s);
}

void fp32_backward(const FlashBackwardArgs& a) {
  const seed::BwdParams p = seed::backward_params(a);
  const bool full = a.instrument == Instrument::full;
  auto* s = static_cast<cudaStream_t>(a.stream);
  const int B = static_cast<int>(a.shape.B);
  if (a.shape.d == 64) a.shape.causal ? backward_all<64, true>(p, B, full, s) : backward_all<64, false>(p, B, full, s);
  else a.shape.causal ? backward_all<128, true>(p, B, full, s) : backward_all<128, false>(p, B, full, s);
}

}  // namespace lpdiag::cuda
