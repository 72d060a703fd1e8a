// Torch tensors to and from the CUDA kernels' argument structs (lpdiag/cuda/flash_attention.hpp),
// written once for the operator and for bench/attention. Header-only, no CUDA types: it builds
// (and is tested) on machines without CUDA too.
#pragma once
#include <torch/torch.h>

#include "lpdiag/cuda/flash_attention.hpp"

namespace lpdiag::hooks {

namespace lc = lpdiag::cuda;

// A (B, H, N, d) bf16 tensor whose last dimension is contiguous.
inline lc::BF16View bf16_view(const torch::Tensor& t) { return {t.data_ptr(), t.stride(0), t.stride(1), t.stride(2)}; }

// An uninitialized tensor of t's sizes and dtype laid out as t: (B, N, H, d) in memory, seen as
// (B, H, N, d), when t is such a view (a head stride below the row stride: nanoGPT's and Hugging
// Face's q, k, v), else contiguous. The op returns O and each gradient in its input's layout, so
// the caller's transpose back and autograd's accumulation into the projection need no copy.
inline torch::Tensor empty_in_layout_of(const torch::Tensor& t) {
  if (t.size(1) > 1 && t.size(2) > 1 && t.stride(1) < t.stride(2))
    return torch::empty({t.size(0), t.size(2), t.size(1), t.size(3)}, t.options()).transpose(1, 2);
  return torch::empty(t.sizes(), t.options());
}
inline lc::OutStrides out_strides(const torch::Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

// What the forward writes and the backward reads again: O, L and, at "full", O_lp - O_hp.
struct FlashForwardTensors {
  torch::Tensor o, lse, residual;
};
inline FlashForwardTensors allocate_forward(const torch::Tensor& q, lc::Instrument level) {
  const auto f32 = q.options().dtype(torch::kFloat32);
  FlashForwardTensors t;
  t.o = empty_in_layout_of(q);
  t.lse = torch::empty({q.size(0), q.size(1), q.size(2)}, f32);
  if (level == lc::Instrument::full) t.residual = torch::empty(q.sizes(), f32);
  return t;
}

// The gradients and the backward's fp32 workspaces.
struct FlashBackwardTensors {
  torch::Tensor dq, dk, dv, dq_accum, delta;
};
inline FlashBackwardTensors allocate_backward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const auto f32 = q.options().dtype(torch::kFloat32);
  return {empty_in_layout_of(q), empty_in_layout_of(k), empty_in_layout_of(v), torch::empty(q.sizes(), f32),
          torch::empty({q.size(0), q.size(1), q.size(2)}, f32)};
}

inline lc::FlashShape flash_shape(const torch::Tensor& q, bool causal) {
  return {q.size(0), q.size(1), q.size(2), q.size(3), causal, 0.f};
}

inline lc::FlashForwardArgs forward_args(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const FlashForwardTensors& out, bool causal, const FixConfig& fix,
                                         lc::Instrument level, lc::DeviceHeadCounters* counters, void* stream) {
  lc::FlashForwardArgs a;
  a.shape = flash_shape(q, causal);
  a.q = bf16_view(q), a.k = bf16_view(k), a.v = bf16_view(v);
  a.o = out.o.data_ptr();
  a.o_strides = out_strides(out.o);
  a.lse = out.lse.data_ptr<float>();
  a.o_residual = out.residual.defined() ? out.residual.data_ptr<float>() : nullptr;
  a.counters = counters;
  a.fix = fix;
  a.instrument = level;
  a.stream = stream;
  return a;
}

inline lc::FlashBackwardArgs backward_args(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           const torch::Tensor& dout, const FlashForwardTensors& fwd,
                                           const FlashBackwardTensors& out, bool causal, lc::Instrument level,
                                           lc::DeviceHeadCounters* counters, void* stream) {
  lc::FlashBackwardArgs a;
  a.shape = flash_shape(q, causal);
  a.q = bf16_view(q), a.k = bf16_view(k), a.v = bf16_view(v), a.o = bf16_view(fwd.o), a.dout = bf16_view(dout);
  a.lse = fwd.lse.data_ptr<float>();
  a.o_residual = fwd.residual.defined() ? fwd.residual.data_ptr<float>() : nullptr;
  a.dq = out.dq.data_ptr(), a.dk = out.dk.data_ptr(), a.dv = out.dv.data_ptr();
  a.dq_strides = out_strides(out.dq), a.dk_strides = out_strides(out.dk), a.dv_strides = out_strides(out.dv);
  a.dq_accum = out.dq_accum.data_ptr<float>();
  a.delta = out.delta.data_ptr<float>();
  a.counters = counters;
  a.instrument = level;
  a.stream = stream;
  return a;
}

}  // namespace lpdiag::hooks
