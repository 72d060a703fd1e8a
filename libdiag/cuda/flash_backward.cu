// Backward launcher and exported entry: delta (and, at "full", the delta errors), the main
// kernel over key tiles, then dQ's scale and rounding.
#include <cuda_runtime.h>

#include "flash/backward_kernel.cuh"
#include "flash/backward_wgmma_kernel.cuh"
#include "flash/engine_select.hpp"
#include "flash/launch_common.hpp"
#include "lpdiag/cuda/cuda_check.hpp"

namespace lpdiag::cuda {
namespace flash {
namespace {

// Keys per backward block when the caller leaves it to us, from `bench_attention --bwd-keys`
// on the H200 (docs/results/performance.md): at d = 128, 128 keys over 8 warps share each query tile's
// load and halve the dQ atomics (+12% causal, +15% non-causal backward); at d = 64 the smaller
// block is 2% faster. The same holds for the wgmma backward: at d = 64, 64 keys
// (one warpgroup per block, two blocks per SM) took 0.404 ms against 0.470 with 128; at d = 128,
// 64 keys took 2.95 ms (causal) against 2.28 with 128.
constexpr int default_bwd_key_block(std::int64_t d) { return d == 128 ? 128 : 64; }

template <int D, bool Causal, int Bc>
void launch_main(const BwdParams& p, int B, cudaStream_t stream) {
  constexpr int smem = bwd_smem_bytes<D, Bc>();
  auto kernel = flash_bwd_kernel<D, Causal, Bc>;
  allow_shared_memory(kernel, smem);
  const dim3 grid((p.N + Bc - 1) / Bc, B * p.H);
  kernel<<<grid, bwd_warps<Bc>() * 32, smem, stream>>>(p);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
}

template <int D, bool Causal, int Keys>
void launch_wgmma(const BwdParams& p, int B, cudaStream_t stream) {
  constexpr int smem = bwd_wgmma_smem_bytes<D>(Keys);
  auto kernel = flash_bwd_wgmma_kernel<D, Causal, Keys>;
  allow_shared_memory(kernel, smem);
  const dim3 grid((p.N + Keys - 1) / Keys, B * p.H);
  kernel<<<grid, 2 * Keys, smem, stream>>>(p);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
}

template <int D, bool Causal>
void launch_main(const BwdParams& p, int B, int key_block, cudaStream_t stream) {
  if (key_block == 128) launch_main<D, Causal, 128>(p, B, stream);
  else launch_main<D, Causal, 64>(p, B, stream);
}

template <int D, bool Causal>
void launch_wgmma(const BwdParams& p, int B, int key_block, cudaStream_t stream) {
  if (key_block == 64) launch_wgmma<D, Causal, 64>(p, B, stream);
  else launch_wgmma<D, Causal, 128>(p, B, stream);
}

template <int D>
void launch_all(const BwdParams& p, int B, bool causal, bool full, bool wgmma, int key_block, cudaStream_t s) {
  const dim3 dgrid((p.N + 255) / 256, B * p.H);
  if (full) flash_bwd_delta_kernel<D, true><<<dgrid, 256, 0, s>>>(p);
  else flash_bwd_delta_kernel<D, false><<<dgrid, 256, 0, s>>>(p);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
  if (wgmma && causal) launch_wgmma<D, true>(p, B, key_block, s);
  else if (wgmma) launch_wgmma<D, false>(p, B, key_block, s);
  else if (causal) launch_main<D, true>(p, B, key_block, s);
  else launch_main<D, false>(p, B, key_block, s);
  const std::int64_t n = static_cast<std::int64_t>(B) * p.H * p.N * D;
  const std::int64_t want = (n + 255) / 256;
  flash_bwd_dq_kernel<D><<<static_cast<int>(want < 8192 ? want : 8192), 256, 0, s>>>(p.dq_accum, p.dq, p.H, p.N, n, p.scale);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace flash

void flash_backward(const FlashBackwardArgs& a) {
  using namespace flash;
  check_kernel_numerics(a.numerics);
  if (a.numerics.policy == Policy::seed) return seed_backward(a);
  if (a.numerics.policy == Policy::seed_mma) return seed_mma_backward(a);
  if (a.numerics.policy == Policy::fp32) return fp32_backward(a);
  BwdParams p{};
  set_shape_and_inputs(p, a.shape, a.q, a.k, a.v);
  p.o = view(a.o, "o");
  p.dout = view(a.dout, "dout");
  require(a.lse, "lse");
  require(a.dq_accum, "dq_accum");
  require(a.delta, "delta");
  if (a.key_block != 0 && a.key_block != 64 && a.key_block != 128)
    throw Error("flash_backward: key_block must be 0 (default), 64 or 128, got " + std::to_string(a.key_block));
  const bool full = a.instrument == Instrument::full;
  if (full) require(a.o_residual, "o_residual (instrumentation is full)"), require(a.counters, "counters");
  p.lse = a.lse;
  p.residual = a.o_residual;
  p.dq = out_view(a.dq, a.dq_strides, a.shape, "dq");
  p.dk = out_view(a.dk, a.dk_strides, a.shape, "dk");
  p.dv = out_view(a.dv, a.dv_strides, a.shape, "dv");
  p.dq_accum = a.dq_accum;
  p.delta = a.delta;
  p.counters = a.counters;
  auto* s = static_cast<cudaStream_t>(a.stream);
  const std::int64_t nd = a.shape.B * a.shape.H * a.shape.N * a.shape.d;
  LPDIAG_CUDA_CHECK(cudaMemsetAsync(a.dq_accum, 0, static_cast<std::size_t>(nd) * sizeof(float), s));
  const int B = static_cast<int>(a.shape.B);
  const bool wgmma = use_wgmma("LPDIAG_FLASH_BACKWARD");
  const int key_block = a.key_block == 0 ? default_bwd_key_block(a.shape.d) : a.key_block;
  if (a.shape.d == 64) launch_all<64>(p, B, a.shape.causal, full, wgmma, key_block, s);
  else launch_all<128>(p, B, a.shape.causal, full, wgmma, key_block, s);
}

}  // namespace lpdiag::cuda
