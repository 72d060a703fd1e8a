// The seed-mma forward's launcher: the seed launchers' checks and parameters, cp.async's
// alignment, the instantiation for (head dim, causal, level), and at `full` the O error pass.
#include <cuda_runtime.h>

#include "lpdiag/cuda/cuda_check.hpp"
#include "seed/seed_launch.hpp"
#include "seed_mma/forward_kernel.cuh"
#include "seed_mma/o_error_kernel.cuh"

namespace lpdiag::cuda {
namespace {

template <int D, bool Causal, int Level>
void launch(const seed::FwdParams& p, int B, cudaStream_t s) {
  const int smem = seed_mma::fwd_smem_bytes<D>(p.key_tile);
  auto kernel = seed_mma::seed_mma_fwd_kernel<D, Causal, Level>;
  flash::allow_shared_memory(kernel, smem);
  const dim3 grid((p.N + seed_mma::kBlockRows - 1) / seed_mma::kBlockRows, B * p.H);
  kernel<<<grid, seed_mma::kThreads, smem, s>>>(p);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
  if constexpr (Level == 2) {
    constexpr int esmem = seed_mma::o_error_smem_bytes<D>();
    auto err = seed_mma::seed_mma_o_error_kernel<D, Causal>;
    flash::allow_shared_memory(err, esmem);
    err<<<dim3((p.N + seed::kChunk - 1) / seed::kChunk, B * p.H), seed::kChunk, esmem, s>>>(p);
    LPDIAG_CUDA_CHECK(cudaGetLastError());
  }
}

template <int D, bool Causal>
void by_level(const seed::FwdParams& p, int B, Instrument level, cudaStream_t s) {
  switch (level) {
    case Instrument::off: return launch<D, Causal, 0>(p, B, s);
    case Instrument::counters: return launch<D, Causal, 1>(p, B, s);
    case Instrument::full: return launch<D, Causal, 2>(p, B, s);
  }
}

}  // namespace

void seed_mma_forward(const FlashForwardArgs& a) {
  const seed::FwdParams p = seed::forward_params(a);
  seed::check_copyable(a.q, "q"), seed::check_copyable(a.k, "k"), seed::check_copyable(a.v, "v");
  auto* s = static_cast<cudaStream_t>(a.stream);
  const int B = static_cast<int>(a.shape.B);
  if (a.shape.d == 64) a.shape.causal ? by_level<64, true>(p, B, a.instrument, s) : by_level<64, false>(p, B, a.instrument, s);
  else a.shape.causal ? by_level<128, true>(p, B, a.instrument, s) : by_level<128, false>(p, B, a.instrument, s);
}

}  // namespace lpdiag::cuda
