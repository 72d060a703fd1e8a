// Forward launcher and exported entry: checks the arguments, picks the instantiation for
// (head dim, causal, instrumentation level) and launches on the caller's stream.
#include <cuda_runtime.h>

#include "flash/forward_kernel.cuh"
#include "flash/engine_select.hpp"
#include "flash/forward_wgmma_kernel.cuh"
#include "flash/launch_common.hpp"
#include "lpdiag/cuda/cuda_check.hpp"

namespace lpdiag::cuda {
namespace flash {
namespace {

template <int D, bool Causal, int Level>
void launch_forward(const FwdParams& p, int B, cudaStream_t stream) {
  constexpr int smem = fwd_smem_bytes<D>();
  auto kernel = flash_fwd_kernel<D, Causal, Level>;
  allow_shared_memory(kernel, smem);
  const dim3 grid((p.N + kFwdRows - 1) / kFwdRows, B * p.H);
  kernel<<<grid, kFwdWarps * 32, smem, stream>>>(p);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
}

template <int D, bool Causal, int Level, int Rows>
void launch_forward_wgmma(const FwdParams& p, int B, cudaStream_t stream) {
  constexpr int smem = fwd_wgmma_smem_bytes<D>(Rows);
  auto kernel = flash_fwd_wgmma_kernel<D, Causal, Level, Rows>;
  allow_shared_memory(kernel, smem);
  const dim3 grid((p.N + Rows - 1) / Rows, B * p.H);
  kernel<<<grid, 2 * Rows, smem, stream>>>(p);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
}

template <int D, bool Causal, int Level>
void launch_forward_wgmma(const FwdParams& p, int B, cudaStream_t stream) {
  if (wgmma_forward_rows(D) == 64) launch_forward_wgmma<D, Causal, Level, 64>(p, B, stream);
  else launch_forward_wgmma<D, Causal, Level, 128>(p, B, stream);
}

template <int D, bool Causal>
void by_level(const FwdParams& p, int B, Instrument level, cudaStream_t s) {
  if (use_wgmma("LPDIAG_FLASH_FORWARD")) {
    switch (level) {
      case Instrument::off: return launch_forward_wgmma<D, Causal, 0>(p, B, s);
      case Instrument::counters: return launch_forward_wgmma<D, Causal, 1>(p, B, s);
      case Instrument::full: return launch_forward_wgmma<D, Causal, 2>(p, B, s);
    }
  }
  switch (level) {
    case Instrument::off: return launch_forward<D, Causal, 0>(p, B, s);
    case Instrument::counters: return launch_forward<D, Causal, 1>(p, B, s);
    case Instrument::full: return launch_forward<D, Causal, 2>(p, B, s);
  }
}

template <int D>
void by_causal(const FwdParams& p, int B, bool causal, Instrument level, cudaStream_t s) {
  if (causal) by_level<D, true>(p, B, level, s);
  else by_level<D, false>(p, B, level, s);
}

}  // namespace
}  // namespace flash

void flash_forward(const FlashForwardArgs& a) {
  using namespace flash;
  check_kernel_numerics(a.numerics);
  if (a.numerics.policy == Policy::seed) return seed_forward(a);
  if (a.numerics.policy == Policy::seed_mma) return seed_mma_forward(a);
  if (a.numerics.policy == Policy::fp32) return fp32_forward(a);
  FwdParams p{};
  set_shape_and_inputs(p, a.shape, a.q, a.k, a.v);
  p.o = out_view(a.o, a.o_strides, a.shape, "o");
  require(a.lse, "lse");
  if (a.instrument != Instrument::off) require(a.counters, "counters (instrumentation is on)");
  if (a.instrument == Instrument::full) require(a.o_residual, "o_residual (instrumentation is full)");
  p.lse = a.lse;
  p.residual = a.o_residual;
  p.counters = a.counters;
  p.fix = flash::fix_params(a.fix);
  auto* s = static_cast<cudaStream_t>(a.stream);
  const int B = static_cast<int>(a.shape.B);
  if (a.shape.d == 64) by_causal<64>(p, B, a.shape.causal, a.instrument, s);
  else by_causal<128>(p, B, a.shape.causal, a.instrument, s);
}

}  // namespace lpdiag::cuda
