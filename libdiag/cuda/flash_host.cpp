// run_attention_cuda: uploads host inputs as bf16, runs the kernels, downloads an AttentionRun.
#include <cuda_runtime.h>

#include <cmath>
#include <memory>

#include "lpdiag/cuda/cuda_check.hpp"
#include "lpdiag/cuda/flash_attention.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/numerics/convert.hpp"

namespace lpdiag::cuda {
namespace {

struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DeviceBuffer = std::unique_ptr<void, DeviceFree>;

DeviceBuffer alloc(std::size_t bytes) {
  void* p = nullptr;
  LPDIAG_CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
  return DeviceBuffer(p);
}

DeviceBuffer upload_bf16(const float* x, std::size_t n) {
  std::vector<std::uint16_t> bits(n);
  for (std::size_t i = 0; i < n; ++i) bits[i] = bf16_bits_rne(x[i]);
  DeviceBuffer d = alloc(n * 2);
  LPDIAG_CUDA_CHECK(cudaMemcpy(d.get(), bits.data(), n * 2, cudaMemcpyHostToDevice));
  return d;
}

std::vector<float> download_bf16(const void* d, std::size_t n) {
  std::vector<std::uint16_t> bits(n);
  LPDIAG_CUDA_CHECK(cudaMemcpy(bits.data(), d, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

std::int64_t count_nonfinite(const std::vector<float>& x) {
  std::int64_t n = 0;
  for (float v : x) n += !std::isfinite(v);
  return n;
}

}  // namespace

AttentionRun run_attention_cuda(const AttentionConfig& cfg, const AttentionInputs& in, Instrument level, bool backward,
                                int bwd_key_block) {
  const KernelNumerics numerics = kernel_numerics(cfg);
  check_kernel_numerics(numerics);
  if (!in.q || !in.k || !in.v) throw InvalidArgument("CUDA attention: q, k and v are required");
  if (backward && !in.dout) throw InvalidArgument("CUDA attention: the backward pass needs dout");
  const FlashShape shape{in.B, in.H, in.N, in.d, cfg.causal, static_cast<float>(cfg.scale)};
  const auto n = static_cast<std::size_t>(in.B * in.H * in.N * in.d);
  const auto rows = static_cast<std::size_t>(in.B * in.H * in.N);
  const std::int64_t sn = in.d, sh = in.N * in.d, sb = in.H * in.N * in.d;
  DeviceBuffer q = upload_bf16(in.q, n), k = upload_bf16(in.k, n), v = upload_bf16(in.v, n);
  DeviceBuffer o = alloc(n * 2), lse = alloc(rows * 4);
  DeviceBuffer counters = alloc(static_cast<std::size_t>(in.H) * sizeof(DeviceHeadCounters));
  DeviceBuffer residual = level == Instrument::full ? alloc(n * 4) : nullptr;
  clear_counters(static_cast<DeviceHeadCounters*>(counters.get()), in.H, nullptr);
  // Poison every output (0xFFFF is a bf16 NaN): an element the kernels never write shows up in nan_count.
  LPDIAG_CUDA_CHECK(cudaMemset(o.get(), 0xFF, n * 2));
  LPDIAG_CUDA_CHECK(cudaMemset(lse.get(), 0xFF, rows * 4));

  FlashForwardArgs f;
  f.shape = shape;
  f.numerics = numerics;
  f.q = {q.get(), sb, sh, sn};
  f.k = {k.get(), sb, sh, sn};
  f.v = {v.get(), sb, sh, sn};
  f.o = o.get();
  f.lse = static_cast<float*>(lse.get());
  f.o_residual = static_cast<float*>(residual.get());
  f.counters = static_cast<DeviceHeadCounters*>(counters.get());
  f.fix = cfg.fix;
  f.instrument = level;
  flash_forward(f);

  AttentionRun run;
  if (backward) {
    DeviceBuffer g = upload_bf16(in.dout, n);
    DeviceBuffer dq = alloc(n * 2), dk = alloc(n * 2), dv = alloc(n * 2), acc = alloc(n * 4), delta = alloc(rows * 4);
    for (void* p : {dq.get(), dk.get(), dv.get()}) LPDIAG_CUDA_CHECK(cudaMemset(p, 0xFF, n * 2));
    FlashBackwardArgs b;
    b.shape = shape;
    b.numerics = numerics;
    b.q = f.q;
    b.k = f.k;
    b.v = f.v;
    b.o = {o.get(), sb, sh, sn};
    b.dout = {g.get(), sb, sh, sn};
    b.lse = f.lse;
    b.o_residual = f.o_residual;
    b.dq = dq.get();
    b.dk = dk.get();
    b.dv = dv.get();
    b.dq_accum = static_cast<float*>(acc.get());
    b.delta = static_cast<float*>(delta.get());
    b.counters = f.counters;
    b.fix = cfg.fix;
    b.instrument = level;
    b.key_block = bwd_key_block;
    flash_backward(b);
    run.dq = download_bf16(dq.get(), n);
    run.dk = download_bf16(dk.get(), n);
    run.dv = download_bf16(dv.get(), n);
  }
  LPDIAG_CUDA_CHECK(cudaDeviceSynchronize());
  run.o = download_bf16(o.get(), n);
  run.lse.resize(rows);
  LPDIAG_CUDA_CHECK(cudaMemcpy(run.lse.data(), lse.get(), rows * 4, cudaMemcpyDeviceToHost));
  run.heads = read_counters(static_cast<DeviceHeadCounters*>(counters.get()), in.H, nullptr);
  if (level != Instrument::full) {
    for (auto& h : run.heads) {
      h.o_err_count = h.o_err_pos = h.o_err_neg = -1;
      h.delta_err_count = h.delta_err_pos = h.delta_err_neg = -1;
      h.o_err_sum = h.o_err_sumsq = h.delta_err_sum = h.delta_err_sumsq = std::nan("");
    }
  }
  run.nan_count = count_nonfinite(run.o) + count_nonfinite(run.lse) + count_nonfinite(run.dq) +
                  count_nonfinite(run.dk) + count_nonfinite(run.dv);
  return run;
}

}  // namespace lpdiag::cuda
