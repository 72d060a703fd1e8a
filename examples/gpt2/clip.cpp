#include "clip.hpp"

namespace gpt2 {

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads, norms;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad()), norms.push_back(p.grad().norm(2).to(torch::kFloat32));
  TORCH_CHECK(!grads.empty(), "clip_grad_norm: no parameter has a gradient");
  const torch::Tensor total = torch::stack(norms).norm(2);
  // min(1, max_norm / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_: a device scalar.
  const torch::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
  for (auto& g : grads) g.mul_(coef.to(g.scalar_type()));
  return total;
}

}  // namespace gpt2
