// lpdiag::attention as a LibTorch operator with autograd. Tensors stop here: the engine sees
// plain float buffers.
#pragma once
#include <torch/torch.h>

namespace lpdiag::hooks {

// q, k, v: (B, H, N, d), bf16 (or fp32), CPU. instrument: "off", "counters", "full".
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                        const std::string& policy, const std::string& fix, const std::string& instrument,
                        int64_t layer_index);

// The operator's parts as registered (register.cpp): the autograd kernel of lpdiag::attention,
// and lpdiag::attention_fwd / attention_bwd, its forward and backward kernels (CPU and CUDA).
torch::Tensor attention_autograd(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                                 c10::string_view policy, c10::string_view fix, c10::string_view instrument, int64_t layer_index);
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> attention_fwd(const torch::Tensor& q, const torch::Tensor& k,
                                                                      const torch::Tensor& v, bool causal, c10::string_view policy,
                                                                      c10::string_view fix, c10::string_view instrument,
                                                                      int64_t layer_index);
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> attention_bwd(const torch::Tensor& dout, const torch::Tensor& q,
                                                                      const torch::Tensor& k, const torch::Tensor& v,
                                                                      const torch::Tensor& o, const torch::Tensor& lse,
                                                                      const torch::Tensor& residual, bool causal, c10::string_view policy,
                                                                      c10::string_view fix, c10::string_view instrument, int64_t layer);

}  // namespace lpdiag::hooks
