#include <cmath>

#include "lpdiag/trace/trace_layout.hpp"
#include "lpdiag/trace/trace_record.hpp"

namespace lpdiag {

bool is_valid_role(const std::string& role) {
  for (const char* r : {"attn_q", "attn_k", "attn_v", "attn_o", "mlp_in", "mlp_out", "embedding", "lm_head", "other"})
    if (role == r) return true;
  return false;
}

TraceRecord TraceRecord::unmeasured(const TraceLayout& layout, std::int64_t step) {
  TraceRecord r;
  r.step = step;
  r.scalars.assign(layout.scalars.size(), std::nan(""));
  for (const auto& a : layout.attention) r.attention.emplace_back(a.n_heads, HeadCounters::unmeasured());
  r.weights.resize(layout.matrices.size());
  for (std::size_t m = 0; m < layout.matrices.size(); ++m)
    r.weights[m].head_spectral_norm.assign(layout.matrices[m].n_heads, std::nan(""));
  r.updates.resize(layout.matrices.size());
  r.activations.resize(layout.activations.size());
  return r;
}

}  // namespace lpdiag
