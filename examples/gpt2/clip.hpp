// Gradient clipping that leaves the norm on the device. LibTorch's clip_grad_norm_ returns a
// double, so it waits for the device every step; the Python one does not, and neither does this.
#pragma once
#include <torch/torch.h>

#include <vector>

namespace gpt2 {

// Scales the gradients so that their global 2-norm is at most max_norm; returns that norm
// (before scaling) as a scalar tensor on the parameters' device.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

}  // namespace gpt2
