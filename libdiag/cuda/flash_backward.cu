// Backward launcher and exported entry: delta (and, at "full", the delta errors), the main
// kernel over key tiles, then dQ's scale and rounding.
#include <cuda_runtime.h>

#include "flash/backward_kernel.cuh"
#include "flash/launch_common.hpp"
#include "lpdiag/cuda/cuda_check.hpp"

namespace lpdiag::cuda {
namespace flash {
namespace {

template <int D, bool Causal>
void launch_main(const BwdParams& p, int B, cudaStream_t stream) {
  constexpr int smem = bwd_smem_bytes<D>();
  auto kernel = flash_bwd_kernel<D, Causal>;
  allow_shared_memory(kernel, smem);
  const dim3 grid((p.N + kBlockKeys - 1) / kBlockKeys, B * p.H);
  kernel<<<grid, kBwdWarps * 32, smem, stream>>>(p);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
}

template <int D>
void launch_all(const BwdParams& p, int B, bool causal, bool full, cudaStream_t s) {
  const dim3 dgrid((p.N + 255) / 256, B * p.H);
  if (full) flash_bwd_delta_kernel<D, true><<<dgrid, 256, 0, s>>>(p);
  else flash_bwd_delta_kernel<D, false><<<dgrid, 256, 0, s>>>(p);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
  if (causal) launch_main<D, true>(p, B, s);
  else launch_main<D, false>(p, B, s);
  const std::int64_t n = static_cast<std::int64_t>(B) * p.H * p.N * D;
  const std::int64_t want = (n + 255) / 256;
  flash_bwd_dq_kernel<<<static_cast<int>(want < 8192 ? want : 8192), 256, 0, s>>>(p.dq_accum, p.dq, n, p.scale);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace flash

void flash_backward(const FlashBackwardArgs& a) {
  using namespace flash;
  check_shape(a.shape);
  BwdParams p{};
  p.q = view(a.q, "q");
  p.k = view(a.k, "k");
  p.v = view(a.v, "v");
  p.o = view(a.o, "o");
  p.dout = view(a.dout, "dout");
  require(a.lse, "lse");
  require(a.dq, "dq");
  require(a.dk, "dk");
  require(a.dv, "dv");
  require(a.dq_accum, "dq_accum");
  require(a.delta, "delta");
  const bool full = a.instrument == Instrument::full;
  if (full) require(a.o_residual, "o_residual (instrumentation is full)"), require(a.counters, "counters");
  p.lse = a.lse;
  p.residual = a.o_residual;
  p.dq = static_cast<__nv_bfloat16*>(a.dq);
  p.dk = static_cast<__nv_bfloat16*>(a.dk);
  p.dv = static_cast<__nv_bfloat16*>(a.dv);
  p.dq_accum = a.dq_accum;
  p.delta = a.delta;
  p.counters = a.counters;
  p.H = static_cast<int>(a.shape.H);
  p.N = static_cast<int>(a.shape.N);
  p.scale = scale_of(a.shape);
  auto* s = static_cast<cudaStream_t>(a.stream);
  const std::int64_t nd = a.shape.B * a.shape.H * a.shape.N * a.shape.d;
  LPDIAG_CUDA_CHECK(cudaMemsetAsync(a.dq_accum, 0, static_cast<std::size_t>(nd) * sizeof(float), s));
  const int B = static_cast<int>(a.shape.B);
  if (a.shape.d == 64) launch_all<64>(p, B, a.shape.causal, full, s);
  else launch_all<128>(p, B, a.shape.causal, full, s);
}

}  // namespace lpdiag::cuda
