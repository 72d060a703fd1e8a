// The seed backward's launcher: delta first, then dK/dV and dQ (independent of each other), on
// the caller's stream.
#include <cuda_runtime.h>

#include "lpdiag/cuda/cuda_check.hpp"
#include "seed/seed_backward_kernels.cuh"
#include "seed/seed_launch.hpp"

namespace lpdiag::cuda {
namespace {

template <int D, bool Causal>
void launch_all(const seed::BwdParams& p, int B, bool full, cudaStream_t s) {
  const dim3 grid((p.N + seed::kChunk - 1) / seed::kChunk, B * p.H);
  if (full) seed::seed_delta_kernel<D, 2><<<grid, seed::kChunk, 0, s>>>(p);
  else seed::seed_delta_kernel<D, 0><<<grid, seed::kChunk, 0, s>>>(p);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
  auto dkdv = seed::seed_dkdv_kernel<D, Causal>;
  flash::allow_shared_memory(dkdv, seed::dkdv_smem_bytes<D>());
  dkdv<<<grid, seed::kChunk, seed::dkdv_smem_bytes<D>(), s>>>(p);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
  auto dq = seed::seed_dq_kernel<D, Causal>;
  flash::allow_shared_memory(dq, seed::dq_smem_bytes<D>());
  dq<<<grid, seed::kChunk, seed::dq_smem_bytes<D>(), s>>>(p);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void seed_backward(const FlashBackwardArgs& a) {
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
  p.query_tile = a.numerics.query_tile;
  auto* s = static_cast<cudaStream_t>(a.stream);
  const int B = static_cast<int>(a.shape.B);
  if (a.shape.d == 64) a.shape.causal ? launch_all<64, true>(p, B, full, s) : launch_all<64, false>(p, B, full, s);
  else a.shape.causal ? launch_all<128, true>(p, B, full, s) : launch_all<128, false>(p, B, full, s);
}

}  // namespace lpdiag::cuda
