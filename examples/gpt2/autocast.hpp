// bf16 autocast on CUDA for the model (the paper's recipe: matmuls in bf16, parameters and the
// optimizer in fp32), and a way out of it for the fp32-attention counterfactual, whose SDPA call
// autocast would otherwise run in bf16. LibTorch's C++ API for this changed in 2.4.
#pragma once
#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace gpt2 {

inline bool cuda_autocast_enabled() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::is_autocast_enabled(at::kCUDA);
#else
  return at::autocast::is_enabled();
#endif
}

inline void set_cuda_autocast(bool on) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCUDA, on);
#else
  at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
  at::autocast::set_enabled(on);
#endif
}

// Autocast for one forward pass (the loss included); the cast weights are dropped at its end.
class Bf16Autocast {
 public:
  explicit Bf16Autocast(bool on) : on_(on) {
    if (on_) set_cuda_autocast(true);
  }
  ~Bf16Autocast() {
    if (!on_) return;
    set_cuda_autocast(false);
    at::autocast::clear_cache();
  }
  Bf16Autocast(const Bf16Autocast&) = delete;
  Bf16Autocast& operator=(const Bf16Autocast&) = delete;

 private:
  bool on_;
};

// Leaves autocast off in a scope (and restores it after).
class AutocastOff {
 public:
  AutocastOff() : was_(cuda_autocast_enabled()) {
    if (was_) set_cuda_autocast(false);
  }
  ~AutocastOff() {
    if (was_) set_cuda_autocast(true);
  }
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  bool was_;
};

}  // namespace gpt2
