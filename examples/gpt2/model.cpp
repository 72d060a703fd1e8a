#include "model.hpp"

#include <torch/version.h>

#include <cmath>
#include <stdexcept>

#include "lpdiag/hooks/attention_op.hpp"
#include "lpdiag/hooks/observer.hpp"
#include "autocast.hpp"

namespace gpt2 {

BlockImpl::BlockImpl(const Config& c, int64_t l) : cfg(c), layer(l) {
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
  c_attn = register_module("c_attn", torch::nn::Linear(c.n_embd, 3 * c.n_embd));
  attn_proj = register_module("attn_proj", torch::nn::Linear(c.n_embd, c.n_embd));
  c_fc = register_module("c_fc", torch::nn::Linear(c.n_embd, 4 * c.n_embd));
  mlp_proj = register_module("mlp_proj", torch::nn::Linear(4 * c.n_embd, c.n_embd));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = cfg.n_embd, H = cfg.n_head, d = C / H;
  auto qkv = c_attn(ln1(x)).split(C, 2);
  auto heads = [&](const torch::Tensor& t) { return t.view({B, T, H, d}).transpose(1, 2).to(torch::kBFloat16); };
  torch::Tensor y;
  if (cfg.attention == "sdpa" || cfg.attention == "sdpa-fp32") {
#if TORCH_VERSION_MAJOR >= 2
    // sdpa-fp32: the same bf16 inputs, attention computed in fp32 (the counterfactual without
    // low-precision attention), the output rounded once to bf16 as every other path returns it.
    const bool fp32 = cfg.attention == "sdpa-fp32" || cfg.guard_fp32;
    auto in = [&](const torch::Tensor& t) { return fp32 ? heads(t).to(torch::kFloat32) : heads(t); };
    const AutocastOff fp32_stays_fp32;  // under --autocast, SDPA would otherwise run in bf16
    const torch::Tensor q = in(qkv[0]), k = in(qkv[1]), v = in(qkv[2]);
    y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
    // lpdiag: on an observed step, what PyTorch's kernel did (y and, in the backward, dy are read only).
    if (cfg.observe_now && cfg.attention == "sdpa" && !cfg.guard_fp32)
      lpdiag::hooks::observe_call(q, k, v, y, true, 0.0, cfg.layer_base + layer, lpdiag::hooks::sdpa_backend(q, k, v, true),
                                  cfg.observe_rows);
    y = y.to(torch::kBFloat16);
#else
    throw std::runtime_error("--attention " + cfg.attention + " needs LibTorch >= 2.0");
#endif
  } else {
    y = lpdiag::hooks::attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), true, cfg.policy, cfg.fix, cfg.instrument,
                                 layer);
  }
  y = y.to(torch::kFloat32).transpose(1, 2).contiguous().view({B, T, C});
  torch::Tensor h = x + attn_proj(y);
  return h + mlp_proj(torch::gelu(c_fc(ln2(h))));
}

void GPTImpl::set_instrument(const std::string& level) {
  cfg.instrument = level;
  for (auto& b : blocks) b->cfg.instrument = level;
}

void GPTImpl::set_observe(bool on) {
  cfg.observe_now = on;
  for (auto& b : blocks) b->cfg.observe_now = on;
}

GPTImpl::GPTImpl(const Config& c) : cfg(c) {
  wte = register_module("wte", torch::nn::Embedding(c.vocab, c.n_embd));
  wpe = register_module("wpe", torch::nn::Embedding(c.block, c.n_embd));
  for (int64_t l = 0; l < c.n_layer; ++l) blocks.push_back(register_module("h" + std::to_string(l), Block(c, l)));
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
  lm_head = register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(c.n_embd, c.vocab).bias(false)));
  for (auto& p : named_parameters()) {
    if (p.key().find("weight") != std::string::npos && p.value().dim() == 2) torch::nn::init::normal_(p.value(), 0.0, 0.02);
    if (p.key().find("bias") != std::string::npos) torch::nn::init::zeros_(p.value());
  }
}

torch::Tensor GPTImpl::forward(const torch::Tensor& idx) {
  const int64_t T = idx.size(1);
  torch::Tensor x = wte(idx) + wpe(torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(idx.device())));
  for (std::size_t l = 0; l < blocks.size(); ++l) {
    x = blocks[l](x);
    if (observe) observe(l, x);
  }
  return lm_head(ln_f(x));
}

}  // namespace gpt2
