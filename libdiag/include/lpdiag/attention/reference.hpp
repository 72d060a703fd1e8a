// fp64 reference attention for one (batch, head): the textbook algorithm (full softmax, no
// tiling), forward and backward. Used to check the emulations' hp path and the kernels.
#pragma once
#include <cstdint>
#include <vector>

namespace lpdiag {

struct ReferenceAttention {
  std::vector<double> o, lse, delta, dq, dk, dv;  // o/dq/dk/dv: N x d; lse/delta: N
};

// q, k, v, dout: N x d row-major. loss = sum(dout .* o) defines the gradients.
ReferenceAttention reference_attention(const double* q, const double* k, const double* v, const double* dout,
                                       std::int64_t N, std::int64_t d, double scale, bool causal);

}  // namespace lpdiag
