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
  const seed::BwdParams p = seed::backward_params(a);
  const bool full = a.instrument == Instrument::full;
  auto* s = static_cast<cudaStream_t>(a.stream);
  const int B = static_cast<int>(a.shape.B);
  if (a.shape.d == 64) a.shape.causal ? launch_all<64, true>(p, B, full, s) : launch_all<64, false>(p, B, full, s);
  else a.shape.causal ? launch_all<128, true>(p, B, full, s) : launch_all<128, false>(p, B, full, s);
}

}  // namespace lpdiag::cuda
