// Deterministic trace content for tests: every value is a function of (step, position), so a
// reader can check any row it gets back without keeping what was written.
#pragma once
#include <cmath>
#include <cstdint>

#include "lpdiag/trace/trace_layout.hpp"
#include "lpdiag/trace/trace_record.hpp"

namespace lpdiag::testing {

inline TraceLayout fixture_layout(int layers = 2, int heads = 3) {
  TraceLayout L;
  L.scalars = {"loss", "lr", "grad_norm", "tokens_per_s"};
  for (int l = 0; l < layers; ++l) {
    L.attention.push_back({"h." + std::to_string(l) + ".attn", l, heads, 64, "fa2", R"({"kind":"none"})"});
    L.matrices.push_back({"h." + std::to_string(l) + ".attn.q", "attn_q", l, heads * 64, heads * 64, heads,
                          "h." + std::to_string(l) + ".attn.c_attn.weight[0:" + std::to_string(heads * 64) + "]"});
    L.matrices.push_back({"h." + std::to_string(l) + ".mlp.c_fc", "mlp_in", l, 4 * heads * 64, heads * 64, 0,
                          "h." + std::to_string(l) + ".mlp.c_fc.weight"});
    L.activations.push_back({"h." + std::to_string(l), l});
  }
  return L;
}

inline double fx(std::int64_t step, int a, int b = 0) { return static_cast<double>(step) * 0.5 + a * 0.125 + b * 0.0078125; }

// Odd steps leave the update statistics unmeasured, to check NaN fill.
inline TraceRecord fixture_record(const TraceLayout& L, std::int64_t step) {
  TraceRecord r = TraceRecord::unmeasured(L, step);
  for (std::size_t i = 0; i < r.scalars.size(); ++i) r.scalars[i] = fx(step, static_cast<int>(i));
  for (std::size_t l = 0; l < r.attention.size(); ++l)
    for (std::size_t h = 0; h < r.attention[l].size(); ++h) {
      HeadCounters& c = r.attention[l][h];
      c = HeadCounters{};
      c.rows = step * 1000 + static_cast<std::int64_t>(l * 10 + h);
      c.repeated_max_rows = step + static_cast<std::int64_t>(h);
      c.o_err_count = 7 * step;
      c.o_err_sum = -fx(step, static_cast<int>(l), static_cast<int>(h));
      c.delta_err_sum = fx(step, static_cast<int>(h), static_cast<int>(l));
      c.logit_max = static_cast<float>(fx(step, static_cast<int>(l + h)));
    }
  for (std::size_t m = 0; m < r.weights.size(); ++m) {
    r.weights[m].spectral_norm = fx(step, static_cast<int>(m), 1);
    for (std::size_t h = 0; h < r.weights[m].head_spectral_norm.size(); ++h)
      r.weights[m].head_spectral_norm[h] = fx(step, static_cast<int>(m), static_cast<int>(h + 2));
    if (step % 2 == 0) r.updates[m].sigma1 = fx(step, static_cast<int>(m), 3);
  }
  for (std::size_t a = 0; a < r.activations.size(); ++a) r.activations[a].max_abs = static_cast<float>(fx(step, static_cast<int>(a)));
  return r;
}

}  // namespace lpdiag::testing
