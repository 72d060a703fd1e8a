// The seed forward's launcher: checks, the fix's parameters, the instantiation for (head dim,
// causal, level), on the caller's stream.
#include <cuda_runtime.h>

#include <cmath>

#include "lpdiag/cuda/cuda_check.hpp"
#include "seed/seed_forward_kernel.cuh"
#include "seed/seed_launch.hpp"

namespace lpdiag::cuda {
namespace {

template <int D, bool Causal, int Level>
void launch(const seed::FwdParams& p, int B, cudaStream_t s) {
  constexpr int smem = seed::fwd_smem_bytes<D>();
  auto kernel = seed::seed_fwd_kernel<D, Causal, Level>;
  flash::allow_shared_memory(kernel, smem);
  kernel<<<dim3((p.N + seed::kChunk - 1) / seed::kChunk, B * p.H), seed::kChunk, smem, s>>>(p);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
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

void seed_forward(const FlashForwardArgs& a) {
  const seed::FwdParams p = seed::forward_params(a);
  auto* s = static_cast<cudaStream_t>(a.stream);
  const int B = static_cast<int>(a.shape.B);
  if (a.shape.d == 64) a.shape.causal ? by_level<64, true>(p, B, a.instrument, s) : by_level<64, false>(p, B, a.instrument, s);
  else a.shape.causal ? by_level<128, true>(p, B, a.instrument, s) : by_level<128, false>(p, B, a.instrument, s);
}

}  // namespace lpdiag::cuda
