// lpdiag::attention as a LibTorch operator with autograd. Tensors stop here: the engine sees
// plain float buffers.
#pragma once
#include <torch/torch.h>

namespace lpdiag::hooks {

// q, k, v: (B, H, N, d), bf16 (or fp32), CPU. instrument: "off", "counters", "full".
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                        const std::string& policy, const std::string& fix, const std::string& instrument,
                        int64_t layer_index);

}  // namespace lpdiag::hooks
