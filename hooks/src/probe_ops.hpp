// torch.ops.lpdiag.probe_families / probe_case / judge_outputs: the probe bench for Python.
#pragma once
#include <torch/torch.h>

#include <string>
#include <tuple>
#include <vector>

namespace lpdiag::hooks {

std::vector<std::string> probe_families();
// q, k, v, dO as float32 (B, H, N, d) tensors (bf16-exact) and the family's description, for
// the fixed probe seed plus seed_offset (the seeds `lpdiag probe --seeds` uses).
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, std::string> probe_case(const std::string& family,
                                                                                                 bool causal, int64_t seed_offset);
// JSON {exact_rounding: {...}, outputs: [{name, o_err_z, delta_err_z, o_err_rms, nan_count, (dq|dk|dv)_err_z,
// (dq|dk|dv)_rel_l2}]}: every output against libdiag's fp64 reference of these inputs.
std::string judge_outputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& dout,
                          bool causal, const std::vector<torch::Tensor>& outputs, const std::vector<std::string>& names,
                          const std::vector<torch::Tensor>& grads);

}  // namespace lpdiag::hooks
