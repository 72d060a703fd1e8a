// The observer at the torch edge: a call of any attention kernel (q, k, v in, O out) measured by
// libdiag's observer (lpdiag/observe/observer.hpp, on the CPU or on CUDA where the tensors are),
// its counters delivered where lpdiag's own kernels deliver theirs, so the Monitor records both
// alike. Nothing here writes to the call's tensors: outputs and gradients pass through untouched.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>

namespace lpdiag::hooks {

// Observes the forward of one call of layer id `layer` (a Monitor's layer_base() + layer).
// q, o: (B, Hq, Nq, d); k, v: (B, Hkv, Nk, d), any strides; bf16 or fp16 (CPU also fp32).
// scale 0: 1/sqrt(d). Only the leading batch elements that hold `max_rows` query rows per head
// are observed (at least one; 0: all); head_mask: bit h observes head h (0: all).
// Returns O - O_exact of the observed rows (float32, (batches, Hq, Nq, d)) for observe_backward;
// an empty tensor when the call was not observed: a call the observer cannot take is skipped,
// counted, and its reason printed once (observer_skips()).
torch::Tensor observe_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& o,
                              bool causal, double scale, int64_t layer, const std::string& name, int64_t max_rows,
                              int64_t head_mask);
// The delta errors of the call's backward: dO (the gradient arriving at O) against the forward's
// O error. Does nothing for an empty o_error.
void observe_backward(const torch::Tensor& dout, const torch::Tensor& o_error, int64_t layer, int64_t head_mask);

// The C++ entry: observes a call whose output `o` the caller computed with its own kernel, and,
// when o requires grad, the backward too (a hook on o reads dO and returns nothing).
void observe_call(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& o, bool causal,
                  double scale, int64_t layer, const std::string& name, int64_t max_rows = 1024, int64_t head_mask = 0);

// The observer as a measurement: one call's per-head statistics, (Hq, 14) float64 on the CPU,
// columns as kObservedStatColumns (dout undefined or empty: no delta columns). Every row observed.
constexpr const char* kObservedStatColumns =
    "rows repeated_max_rows zero_max_repeated_rows logit_max o_err_count o_err_sum o_err_sumsq o_err_pos o_err_neg "
    "delta_err_count delta_err_sum delta_err_sumsq delta_err_pos delta_err_neg";
torch::Tensor observe_stats(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& o,
                            const torch::Tensor& dout, bool causal, double scale);

// The backend PyTorch picks for scaled_dot_product_attention(q, k, v, causal) with no mask and no
// dropout: "cudnn", "flash", "efficient", "math"; "sdpa" where LibTorch does not say (< 2.0).
std::string sdpa_backend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal);

// Why calls were skipped so far, with their counts (process-wide).
std::map<std::string, int64_t> observer_skips();

}  // namespace lpdiag::hooks
