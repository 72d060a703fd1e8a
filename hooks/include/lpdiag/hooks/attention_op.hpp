// lpdiag::attention as a LibTorch operator with autograd. Tensors stop here: the engine sees
// plain float buffers. The spec crosses as its one serialized form (AttentionSpec::to_json).
#pragma once
#include <torch/torch.h>

#include "lpdiag/attention/attention_spec.hpp"

namespace lpdiag::hooks {

// q, k, v: (B, H, N, d), bf16 (or fp32 on the CPU). The C++ entry: the typed spec.
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const AttentionSpec& spec,
                        int64_t layer_index);
// The same from the text forms (policy "fa2", fix "none", level "off" / "counters" / "full"),
// parsed once into the spec (parse_attention_spec; bad text throws c10::Error naming it).
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                        const std::string& policy, const std::string& fix, const std::string& level, int64_t layer_index);

// The operator's parts as registered (register.cpp): the autograd kernel of lpdiag::attention,
// and lpdiag::attention_fwd / attention_bwd, its forward and backward kernels (CPU and CUDA).
// `spec`: AttentionSpec's JSON.
torch::Tensor attention_autograd(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, c10::string_view spec,
                                 int64_t layer_index);
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> attention_fwd(const torch::Tensor& q, const torch::Tensor& k,
                                                                      const torch::Tensor& v, c10::string_view spec,
                                                                      int64_t layer_index);
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> attention_bwd(const torch::Tensor& dout, const torch::Tensor& q,
                                                                      const torch::Tensor& k, const torch::Tensor& v,
                                                                      const torch::Tensor& o, const torch::Tensor& lse,
                                                                      const torch::Tensor& residual, c10::string_view spec,
                                                                      int64_t layer);

}  // namespace lpdiag::hooks
