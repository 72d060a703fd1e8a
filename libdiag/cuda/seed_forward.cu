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
  if (a.shape.d == 64) a.shape.causal ? by_level<64, true>(p, B, a.instrument, s) : by_level<64, false>(p, B, a.instrument, s);
  else a.shape.causal ? by_level<128, true>(p, B, a.instrument, s) : by_level<128, false>(p, B, a.instrument, s);
}

}  // namespace lpdiag::cuda
