// The kernels' view of one launch: raw device pointers, element strides and the numerics
// switches, filled by the launchers from the public argument structs.
#pragma once
#include "lpdiag/attention/attention_config.hpp"
#include <cuda_bf16.h>

#include <cstdint>

#include "lpdiag/cuda/flash_attention.hpp"

namespace lpdiag::cuda::flash {

constexpr int kBlockKeys = kernel_key_tile;

struct Strided {
  const __nv_bfloat16* ptr;
  std::int64_t sb, sh, sn;
  __device__ const __nv_bfloat16* head(int b, int h) const { return ptr + b * sb + h * sh; }
};

// An output: d contiguous, element strides for b, h, n.
struct OutView {
  __nv_bfloat16* ptr;
  std::int64_t sb, sh, sn;
  __device__ __nv_bfloat16* row(int b, int h, int n) const { return ptr + b * sb + h * sh + n * sn; }
};

// The fix as every kernel family takes it (fa2, seed, seed-mma, fp32): the one device form of
// FixConfig, filled by fix_params.
struct FixParams {
  int kind;  // 0 none, 1 paper, 2 safe, 3 sr: FixConfig::Kind's order
  float tol, beta, offset;
  std::uint32_t seed;  // sr
};

inline FixParams fix_params(const FixConfig& f) {
  return {static_cast<int>(f.kind), static_cast<float>(f.tol), static_cast<float>(f.beta), static_cast<float>(f.offset), f.seed};
}

struct FwdParams {
  Strided q, k, v;
  OutView o;
  float* lse;
  float* residual;
  DeviceHeadCounters* counters;
  int H, N;
  float scale;
  FixParams fix;
};

struct BwdParams {
  Strided q, k, v, o, dout;
  const float* lse;
  const float* residual;
  OutView dq, dk, dv;
  float* dq_accum;
  float* delta;
  DeviceHeadCounters* counters;
  int H, N;
  float scale;
};

// Order-preserving float -> unsigned, so atomicMax on the key is a max on the float.
__device__ __forceinline__ unsigned int float_key(float f) {
  const unsigned int u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

}  // namespace lpdiag::cuda::flash
