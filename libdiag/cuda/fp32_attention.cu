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
  seed::FwdParams p{};
  seed::set_common(p, a);
  flash::require(a.lse, "lse");
  if (a.instrument != Instrument::off) flash::require(a.counters, "counters (instrumentation is on)");
  if (a.instrument == Instrument::full) flash::require(a.o_residual, "o_residual (instrumentation is full)");
  p.o = flash::out_view(a.o, a.o_strides, a.shape, "o");
  p.lse = a.lse;
  p.residual = a.o_residual;
  p.counters = a.counters;
  p.scale_hp = a.shape.scale != 0.f ? double(a.shape.scale) : 1.0 / std::sqrt(static_cast<double>(a.shape.d));
  p.fix = seed::fix_params(a.fix);
  auto* s = static_cast<cudaStream_t>(a.stream);
  const int B = static_cast<int>(a.shape.B);
  if (a.shape.d == 64)
    a.shape.causal ? forward_by_level<64, true>(p, B, a.instrument, s) : forward_by_level<64, false>(p, B, a.instrument, s);
  else a.shape.causal ? forward_by_level<128, true>(p, B, a.instrument, s) : forward_by_level<128, false>(p, B, a.instrument, s);
}

void fp32_backward(const FlashBackwardArgs& a) {
  seed::BwdParams p{};
  seed::set_common(p, a);
  p.o = seed::view_of(a.o, "o");
  p.dout = seed::view_of(a.dout, "dout");
  flash::require(a.lse, "lse");
  flash::require(a.delta, "delta");
  const bool full = a.instrument == Instrument::full;
  if (full) flash::require(a.o_residual, "o_residual (instrumentation is full)"), flash::require(a.counters, "counters");
  p.lse = a.lse;
  p.residual = a.o_residual;
  p.delta = a.delta;
  p.dq = flash::out_view(a.dq, a.dq_strides, a.shape, "dq");
  p.dk = flash::out_view(a.dk, a.dk_strides, a.shape, "dk");
  p.dv = flash::out_view(a.dv, a.dv_strides, a.shape, "dv");
  p.counters = a.counters;
  p.fix = seed::fix_params(a.fix);
  auto* s = static_cast<cudaStream_t>(a.stream);
  const int B = static_cast<int>(a.shape.B);
  if (a.shape.d == 64) a.shape.causal ? backward_all<64, true>(p, B, full, s) : backward_all<64, false>(p, B, full, s);
  else a.shape.causal ? backward_all<128, true>(p, B, full, s) : backward_all<128, false>(p, B, full, s);
}

}  // namespace lpdiag::cuda
