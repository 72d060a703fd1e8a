// Sums of signed errors (O_lp - O_hp, delta_lp - delta_hp) as the trace keeps them: sum, sum of
// squares, count, positives, negatives. A thread adds its errors, the warp sums by shuffles, one
// lane per warp adds into the block's shared copy, one thread adds that to the head's counters.
#pragma once
#include <cstdint>

namespace lpdiag::cuda::flash {

struct ErrorSums {
  double sum = 0.0, sumsq = 0.0;
  unsigned int n = 0, pos = 0, neg = 0;

  __device__ __forceinline__ void add(double e) {
    sum += e;
    sumsq += e * e;
    n += 1;
    pos += e > 0.0;
    neg += e < 0.0;
  }
  // Every lane ends with the warp's total.
  __device__ __forceinline__ void warp_sum() {
    for (int off = 16; off > 0; off /= 2) {
      sum += __shfl_xor_sync(0xffffffffu, sum, off);
      sumsq += __shfl_xor_sync(0xffffffffu, sumsq, off);
      n += __shfl_xor_sync(0xffffffffu, n, off);
      pos += __shfl_xor_sync(0xffffffffu, pos, off);
      neg += __shfl_xor_sync(0xffffffffu, neg, off);
    }
  }
};

// The block's sums, in shared memory: clear() by one thread before a barrier, add() by one lane
// per warp, then after a barrier flush() by one thread into the head's counter fields.
struct BlockErrorSums {
  double sum, sumsq;
  unsigned long long n, pos, neg;

  __device__ __forceinline__ void clear() { sum = sumsq = 0.0, n = pos = neg = 0; }
  __device__ __forceinline__ void add(const ErrorSums& w) {
    atomicAdd(&sum, w.sum);
    atomicAdd(&sumsq, w.sumsq);
    atomicAdd(&n, static_cast<unsigned long long>(w.n));
    atomicAdd(&pos, static_cast<unsigned long long>(w.pos));
    atomicAdd(&neg, static_cast<unsigned long long>(w.neg));
  }
  __device__ __forceinline__ void flush(double* g_sum, double* g_sumsq, unsigned long long* g_n, unsigned long long* g_pos,
                                        unsigned long long* g_neg) const {
    atomicAdd(g_sum, sum);
    atomicAdd(g_sumsq, sumsq);
    atomicAdd(g_n, n);
    atomicAdd(g_pos, pos);
    atomicAdd(g_neg, neg);
  }
};

}  // namespace lpdiag::cuda::flash
