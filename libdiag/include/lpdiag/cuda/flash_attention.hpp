// The CUDA FlashAttention-2 kernels (bf16, head dim 64 or 128) with lpdiag's instrumentation and
// the fix, as plain entries on device pointers. No CUDA or torch types cross this header: the
// stream is a cudaStream_t passed as void*. docs/reference/cuda-kernels.md gives the order of operations
// and where it differs from the CPU fa2 emulation.
#pragma once
#include <cstdint>
#include <vector>

#include "lpdiag/attention/attention_config.hpp"
#include "lpdiag/attention/attention_spec.hpp"
#include "lpdiag/trace/head_counters.hpp"

namespace lpdiag::cuda {

// The instrumentation level: the one enum the CPU engine and the kernels share (attention_spec.hpp).
using Instrument = lpdiag::Level;
constexpr int kernel_key_tile = 64;  // the key tile: the online-softmax rescaling points

// One head's counters as the kernels accumulate them on the device (never cleared by a kernel;
// clear_counters zeroes them). logit_max_key is the float's order-preserving unsigned encoding
// (0 means "nothing seen").
struct DeviceHeadCounters {
  unsigned long long rows, repeated_max_rows, tile_repeated_max_rows, zero_max_repeated_rows;
  unsigned long long pbar_one_entries, fix_engaged_rows;
  unsigned long long o_err_count, o_err_pos, o_err_neg;
  double o_err_sum, o_err_sumsq;
  unsigned long long delta_err_count, delta_err_pos, delta_err_neg;
  double delta_err_sum, delta_err_sumsq;
  unsigned int logit_max_key, pad;
};

HeadCounters to_head_counters(const DeviceHeadCounters& c);
void clear_counters(DeviceHeadCounters* dev, std::int64_t heads, void* stream);
// Copies H device counters to the host (synchronizes the stream).
std::vector<HeadCounters> read_counters(const DeviceHeadCounters* dev, std::int64_t heads, void* stream);

// A bf16 (B, H, N, d) tensor on the device: element strides for b, h and n; d is contiguous.
struct BF16View {
  const void* ptr = nullptr;
  std::int64_t sb = 0, sh = 0, sn = 0;
};
// Where a bf16 (B, H, N, d) output goes: element strides for b, h and n, d contiguous; all zero
// means contiguous. Lets the op return O and the gradients in its inputs' layout (a (B, N, H, d)
// tensor seen as (B, H, N, d), as nanoGPT and Hugging Face make q, k, v), so that autograd and
// the caller's transpose back need no copy.
struct OutStrides {
  std::int64_t sb = 0, sh = 0, sn = 0;
};

struct FlashShape {
  std::int64_t B = 0, H = 0, N = 0, d = 0;
  bool causal = false;
  float scale = 0.f;  // alpha; 0 means 1/sqrt(d) rounded to fp32
};

// The numerics a launch runs: fa2 (the FlashAttention-2 kernels, key tile 64) or seed (the
// paper's all-bf16 order on the CUDA cores, bit for bit the CPU emulation; key_tile 64 ... 512, a
// multiple of 64; query_tile, a multiple of 64, sets the backward's dK/dV rounding points).
struct KernelNumerics {
  Policy policy = Policy::fa2;
  int key_tile = kernel_key_tile;
  int query_tile = 64;
};
// The numerics a config declares (policy and tiles), as the kernels take them.
inline KernelNumerics kernel_numerics(const AttentionConfig& c) { return {c.policy, c.tile_k, c.tile_q}; }

struct FlashForwardArgs {
  FlashShape shape;
  KernelNumerics numerics;
  BF16View q, k, v;
  void* o = nullptr;                      // bf16 (B, H, N, d) with o_strides
  OutStrides o_strides;
  float* lse = nullptr;                   // (B, H, N)
  float* o_residual = nullptr;            // full only: O_lp - O_hp, fp32 (B, H, N, d)
  DeviceHeadCounters* counters = nullptr; // H entries, added to; required unless instrument is off
  FixConfig fix;                          // none, paper or safe (tol, beta, offset as the CPU's)
  Instrument instrument = Instrument::off;
  void* stream = nullptr;
};

struct FlashBackwardArgs {
  FlashShape shape;
  KernelNumerics numerics;               // as the forward's (seed: dq_accum is not used)
  BF16View q, k, v, o, dout;
  const float* lse = nullptr;             // from the forward
  const float* o_residual = nullptr;      // full only: the forward's residual
  void* dq = nullptr;                     // bf16 (B, H, N, d) with dq_strides; likewise dk, dv
  void* dk = nullptr;
  void* dv = nullptr;
  OutStrides dq_strides, dk_strides, dv_strides;
  float* dq_accum = nullptr;              // workspace: fp32 (B, H, N, d)
  float* delta = nullptr;                 // workspace: fp32 (B, H, N)
  DeviceHeadCounters* counters = nullptr; // full only: receives the delta errors
  FixConfig fix;                          // fp32 only: the forward's (its delta recomputes O)
  Instrument instrument = Instrument::off;
  int key_block = 0;                      // keys per block: 64 or 128; 0 = the tuned default
  void* stream = nullptr;
};

// Throw lpdiag::Error naming the bad argument (shape, head dim, stride, missing buffer, policy).
void flash_forward(const FlashForwardArgs& a);
void flash_backward(const FlashBackwardArgs& a);
// The seed and fp32 kernels, which flash_forward / flash_backward call for those policies.
void seed_forward(const FlashForwardArgs& a);
void seed_backward(const FlashBackwardArgs& a);
// The seed-mma kernels: seed's order and roundings, the products on the tensor cores.
void seed_mma_forward(const FlashForwardArgs& a);
void seed_mma_backward(const FlashBackwardArgs& a);
void fp32_forward(const FlashForwardArgs& a);
void fp32_backward(const FlashBackwardArgs& a);
// Throws unless the kernels implement `n` (the policy, its tiles).
void check_kernel_numerics(const KernelNumerics& n);

}  // namespace lpdiag::cuda

#include "lpdiag/attention/engine.hpp"

namespace lpdiag::cuda {

// The engine's interface on the GPU: host inputs (bf16 values held in fp32, [B, H, N, d]) in,
// an AttentionRun out, for tests, replay and benchmarks. Policy fa2 with tile_k 64 (the kernels'
// key tile), or seed with tile_k and tile_q multiples of 64 (tile_k <= 512); anything else throws
// InvalidArgument. heads[] carries the counters and,
// at "full", the O and delta error sums (o_err / delta_err accumulators stay empty: the kernels
// keep sums, not the per-element stream).
// `bwd_key_block`: FlashBackwardArgs::key_block (0 = default), so tests cover every variant.
AttentionRun run_attention_cuda(const AttentionConfig& cfg, const AttentionInputs& in, Instrument level, bool backward,
                                int bwd_key_block = 0);

}  // namespace lpdiag::cuda
