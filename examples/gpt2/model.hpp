// GPT-2 in LibTorch (pre-LayerNorm blocks, fused c_attn, GELU MLP, learned positions), with
// attention through the lpdiag::attention operator in bf16.
#pragma once
#include <functional>
#include <torch/torch.h>

#include <string>

namespace gpt2 {

struct Config {
  int64_t vocab = 256, block = 64, n_layer = 2, n_head = 2, n_embd = 64;
  std::string policy = "fa2", fix = "none", instrument = "counters";
  // "lpdiag": the lpdiag::attention op (the hooks); "sdpa": PyTorch's own scaled_dot_product_attention
  // (LibTorch >= 2.0) in bf16, the run without hooks that the overhead benchmark compares against;
  // "sdpa-fp32": PyTorch's SDPA on the bf16 inputs cast to fp32 (the fp32-attention counterfactual).
  std::string attention = "lpdiag";
  // --attention sdpa: observe this step's attention calls (lpdiag::hooks::observe_call) as layer
  // ids layer_base + layer, looking at observe_rows query rows per head.
  bool observe_now = false;
  int64_t layer_base = 0, observe_rows = 1024;
  // --attention sdpa under --guard: this block's attention runs in fp32 since the Monitor's alarm
  // named its layer (the op's layers are switched by the op itself).
  bool guard_fp32 = false;
};

struct BlockImpl : torch::nn::Module {
  BlockImpl(const Config& c, int64_t layer);
  torch::Tensor forward(const torch::Tensor& x);
  Config cfg;
  int64_t layer;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear c_attn{nullptr}, attn_proj{nullptr}, c_fc{nullptr}, mlp_proj{nullptr};
};
TORCH_MODULE(Block);

struct GPTImpl : torch::nn::Module {
  explicit GPTImpl(const Config& c);
  torch::Tensor forward(const torch::Tensor& idx);  // logits (B, T, vocab)
  Config cfg;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  std::vector<Block> blocks;
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear lm_head{nullptr};
  // The op's instrumentation level of every block from now on ("off", "counters", "full").
  void set_instrument(const std::string& level);
  // Whether the coming step's attention is observed (--attention sdpa).
  void set_observe(bool on);
  // Called with each block's output during forward (lpdiag: the Monitor's activations).
  std::function<void(std::size_t layer, const torch::Tensor& out)> observe;
};
TORCH_MODULE(GPT);

}  // namespace gpt2
