// The seed-mma backward's launcher: seed's delta kernel first, then the tensor-core dK/dV and dQ
// kernels (independent of each other), on the caller's stream.
#include <cuda_runtime.h>

#include "lpdiag/cuda/cuda_check.hpp"
#include "seed/seed_backward_kernels.cuh"
#include "seed/seed_launch.hpp"
#include "seed_mma/backward_kernels.cuh"

namespace lpdiag::cuda {
namespace {

template <int D, bool Causal>
void launch_all(const seed::BwdParams& p, int B, bool full, cudaStream_t s) {
  const dim3 rows((p.N + seed::kChunk - 1) / seed::kChunk, B * p.H);
  if (full) seed::seed_delta_kernel<D, 2><<<rows, seed::kChunk, 0, s>>>(p);
  else seed::seed_delta_kernel<D, 0><<<rows, seed::kChunk, 0, s>>>(p);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
  const dim3 grid((p.N + seed_mma::kBlockRows - 1) / seed_mma::kBlockRows, B * p.H);
  constexpr int kv_smem = seed_mma::dkdv_smem_bytes<D>();
  auto dkdv = seed_mma::seed_mma_dkdv_kernel<D, Causal>;
  flash::allow_shared_memory(dkdv, kv_smem);
  dkdv<<<grid, seed_mma::kThreads, kv_smem, s>>>(p);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
  constexpr int q_smem = seed_mma::dq_smem_bytes<D>();
  auto dq = seed_mma::seed_mma_dq_kernel<D, Causal>;
  flash::allow_shared_memory(dq, q_smem);
  dq<<<grid, seed_mma::kThreads, q_smem, s>>>(p);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void seed_mma_backward(const FlashBackwardArgs& a) {
  const seed::BwdParams p = seed::backward_params(a);
  seed::check_copyable(a.q, "q"), seed::check_copyable(a.k, "k"), seed::check_copyable(a.v, "v");
  seed::check_copyable(a.dout, "dout");
  const bool full = a.instrument == Instrument::full;
  auto* s = static_cast<cudaStream_t>(a.stream);
  const int B = static_cast<int>(a.shape.B);
  if (a.shape.d == 64) a.shape.causal ? launch_all<64, true>(p, B, full, s) : launch_all<64, false>(p, B, full, s);
  else a.shape.causal ? launch_all<128, true>(p, B, full, s) : launch_all<128, false>(p, B, full, s);
}

}  // namespace lpdiag::cuda
