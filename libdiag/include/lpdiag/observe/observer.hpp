// The observer: what an attention kernel that lpdiag did not write did, measured from outside. Given one
// call's inputs q, k, v and the kernel's own output O (and, on the backward, dO), it fills the
// trace's per-head fields (head_counters.hpp) that do not need the kernel's insides:
//  - rows, repeated_max_rows, zero_max_repeated_rows and logit_max, from S in fp32: the exact dot
//    product (fp64, exact for bf16 and fp16 inputs up to d = 2^29 / max product ratio) rounded
//    once to fp32, times the scale in fp32. A kernel that sums S in another order can see a tie
//    this S does not (or the reverse) when two scores differ in their last bits; ties of equal
//    inputs (a sink key repeated, duplicated keys) are ties in every order and match exactly.
//  - the O error O_kernel - O_exact per element, O_exact the softmax of the exact scores in fp64;
//  - the delta error per row, rowsum(dO * O_kernel) - rowsum(dO * O_exact), formed in fp64 as
//    rowsum(dO * (O_kernel - O_exact)).
// The counters the observer cannot see (tile ties, P-bar == 1 entries, fix engagement) stay 0
// here; the trace records them as unmeasured for observed layers.
// The CUDA entries (lpdiag/cuda/observer.hpp) compute the same quantities on the device.
#pragma once
#include <cstdint>
#include <vector>

#include "lpdiag/trace/head_counters.hpp"

namespace lpdiag {

// One attention call, as float values of the bf16 / fp16 tensors (exact), row-major:
// q and o (B, Hq, Nq, d); k and v (B, Hkv, Nk, d), Hq a multiple of Hkv (grouped-query attention:
// q head h reads k/v head h / (Hq / Hkv)).
struct ObservedCall {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* o = nullptr;
  std::int64_t B = 0, Hq = 0, Hkv = 0, Nq = 0, Nk = 0, d = 0;
  bool causal = false;  // query i sees keys 0..i (needs Nq == Nk)
  double scale = 0.0;   // 0: 1/sqrt(d)
  // Observe only batch elements [0, batches) (0: all): an observed step's cost is set by the rows
  // it looks at, not by the batch the kernel ran.
  std::int64_t batches = 0;
  // Observe only the heads whose bit is set (0: all; needs Hq <= 64 otherwise).
  std::uint64_t head_mask = 0;

  std::int64_t observed_batches() const { return batches > 0 && batches < B ? batches : B; }
  bool observes_head(std::int64_t h) const { return head_mask == 0 || ((head_mask >> h) & 1u); }
};

// Throws InvalidArgument naming what the observer cannot take (shapes, a causal call with
// Nq != Nk, a head mask beyond 64 heads, missing pointers unless pointers is false: the CUDA
// entries check the shape of calls whose tensors are on the device).
void check_observed_call(const ObservedCall& c, bool pointers = true);

struct ObservedForward {
  std::vector<HeadCounters> heads;  // Hq entries; the delta fields are 0 (the backward's)
  std::vector<float> o_error;       // O_kernel - O_exact, (observed_batches, Hq, Nq, d); 0 for unobserved heads
};

// threads 0: hardware concurrency. Deterministic: partial sums merge in a fixed order.
ObservedForward observe_forward(const ObservedCall& c, int threads = 0);

// The delta errors of the backward: dout (observed_batches, Hq, Nq, d) against the forward's
// o_error. Hq entries with only the delta fields set (logit_max -inf, the rest 0).
std::vector<HeadCounters> observe_backward(const float* dout, const std::vector<float>& o_error, std::int64_t batches,
                                           std::int64_t Hq, std::int64_t Nq, std::int64_t d, std::uint64_t head_mask = 0);

}  // namespace lpdiag
