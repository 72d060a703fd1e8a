// The observer's kernels. Forward: a block takes kRows query rows of one (batch, head) and walks
// the key tiles: S in fp64 from the exact products (fp32-rounded copies for the ties and the
// logit max), an online softmax in fp64, O_exact accumulated in fp64; then O_kernel - O_exact per
// element, kept for the backward and summed per head. Backward: a warp per row forms
// sum(dO * (O_kernel - O_exact)). Eight threads share a query row throughout, so a row's
// softmax state sits in their registers and never crosses threads.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "flash/error_sums.cuh"
#include "flash/params.cuh"
#include "lpdiag/cuda/cuda_check.hpp"
#include "lpdiag/cuda/observer.hpp"
#include "lpdiag/error.hpp"

namespace lpdiag::cuda {
namespace {

using flash::BlockErrorSums;
using flash::ErrorSums;
using flash::float_key;

constexpr int kRows = 16;     // query rows per block
constexpr int kLanes = 8;     // threads per row
constexpr int kKeys = 32;     // keys per tile
constexpr int kThreads = kRows * kLanes;
constexpr int kPs = kKeys + 1;
constexpr int kMaxD = 256;
constexpr int kCols = kMaxD / kLanes;  // accumulator columns per thread at most

__device__ __forceinline__ float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float load(const __half* p) { return __half2float(*p); }

struct FwdParams {
  ObservedView q, k, v, o;
  int Hq, group, Nq, Nk, d;
  bool causal;
  double scale;
  unsigned long long head_mask;
  float* o_error;
  DeviceHeadCounters* counters;
};

template <typename T>
__global__ void __launch_bounds__(kThreads) observe_forward_kernel(FwdParams p) {
  const int h = blockIdx.y, b = blockIdx.z;
  if (p.head_mask && !((p.head_mask >> h) & 1ull)) return;
  extern __shared__ double smem[];
  // Rows padded by one element, so the rows a warp reads at once fall in different banks.
  const int d = p.d, ld = d + 1;
  double* ps = smem;                                          // kRows x (kKeys + 1)
  float* qs = reinterpret_cast<float*>(ps + kRows * kPs);     // kRows x (d + 1)
  float* ks = qs + kRows * ld;                                // kKeys x (d + 1)
  float* vs = ks + kKeys * ld;                            // kKeys x d
  __shared__ BlockErrorSums blk;
  __shared__ unsigned long long blk_rows, blk_rep, blk_zero;
  __shared__ unsigned int blk_lmax;

  const int t = threadIdx.x, r = t / kLanes, lane8 = t % kLanes;
  const int row0 = blockIdx.x * kRows, i = row0 + r;
  const bool live = i < p.Nq;
  const int hk = h / p.group;
  const T* qg = static_cast<const T*>(p.q.ptr) + b * p.q.sb + h * p.q.sh;
  const T* kg = static_cast<const T*>(p.k.ptr) + b * p.k.sb + hk * p.k.sh;
  const T* vg = static_cast<const T*>(p.v.ptr) + b * p.v.sb + hk * p.v.sh;
  const T* og = static_cast<const T*>(p.o.ptr) + b * p.o.sb + h * p.o.sh;
  if (t == 0) blk.clear(), blk_rows = blk_rep = blk_zero = 0, blk_lmax = 0;
  for (int x = t; x < kRows * d; x += kThreads) {
    const int rr = x / d, c = x % d;
    qs[rr * ld + c] = row0 + rr < p.Nq ? load(qg + static_cast<long long>(row0 + rr) * p.q.sn + c) : 0.f;
  }
  const float scale32 = static_cast<float>(p.scale);
  double m = -INFINITY, l = 0.0;
  float max32 = -INFINITY;
  unsigned int ties = 0;
  double acc[kCols];
#pragma unroll
  for (int u = 0; u < kCols; ++u) acc[u] = 0.0;
  const int last_row = min(p.Nq, row0 + kRows) - 1;
  const int n_keys = p.causal ? last_row + 1 : p.Nk;
  for (int j0 = 0; j0 < n_keys; j0 += kKeys) {
    __syncthreads();
    for (int x = t; x < kKeys * d; x += kThreads) {
      const int jj = x / d, c = x % d, j = j0 + jj;
      const bool in = j < p.Nk;
      ks[jj * ld + c] = in ? load(kg + static_cast<long long>(j) * p.k.sn + c) : 0.f;
      vs[jj * d + c] = in ? load(vg + static_cast<long long>(j) * p.v.sn + c) : 0.f;
    }
    __syncthreads();
    // Scores of this thread's keys lane8, lane8 + 8, ...: exact products, fp64 sums.
    double s[kKeys / kLanes];
    double tile_m = -INFINITY;
    float tile32 = -INFINITY;
    unsigned int tile_ties = 0;
#pragma unroll
    for (int u = 0; u < kKeys / kLanes; ++u) {
      const int jj = lane8 + u * kLanes, j = j0 + jj;
      const bool ok = live && j < p.Nk && (!p.causal || j <= i);
      double dot = 0.0;
      if (ok)
        for (int c = 0; c < d; ++c) dot = fma(static_cast<double>(qs[r * ld + c]), static_cast<double>(ks[jj * ld + c]), dot);
      s[u] = ok ? p.scale * dot : -INFINITY;
      if (ok) {
        const float s32 = scale32 * static_cast<float>(dot);
        if (s32 > tile32) tile32 = s32, tile_ties = 1;
        else if (s32 == tile32) ++tile_ties;
        tile_m = fmax(tile_m, s[u]);
      }
    }
    // The row's eight threads agree on the tile's max and its ties.
#pragma unroll
    for (int off = 1; off < kLanes; off *= 2) {
      tile_m = fmax(tile_m, __shfl_xor_sync(0xffffffffu, tile_m, off));
      const float o32 = __shfl_xor_sync(0xffffffffu, tile32, off);
      const unsigned int oties = __shfl_xor_sync(0xffffffffu, tile_ties, off);
      if (o32 > tile32) tile32 = o32, tile_ties = oties;
      else if (o32 == tile32 && o32 != -INFINITY) tile_ties += oties;
    }
    if (tile32 > max32) max32 = tile32, ties = tile_ties;
    else if (tile32 == max32 && tile32 != -INFINITY) ties += tile_ties;
    const double m_new = fmax(m, tile_m);
    const double corr = m_new == -INFINITY ? 1.0 : exp(m - m_new);
    double lsum = 0.0;
#pragma unroll
    for (int u = 0; u < kKeys / kLanes; ++u) {
      const double pj = s[u] == -INFINITY ? 0.0 : exp(s[u] - m_new);
      ps[r * kPs + lane8 + u * kLanes] = pj;
      lsum += pj;
    }
#pragma unroll
    for (int off = 1; off < kLanes; off *= 2) lsum += __shfl_xor_sync(0xffffffffu, lsum, off);
    l = l * corr + lsum;
    m = m_new;
    __syncwarp();
#pragma unroll
    for (int u = 0; u < kCols; ++u) {
      const int c = lane8 + u * kLanes;
      if (c < d) {
        double a = acc[u] * corr;
        for (int jj = 0; jj < kKeys; ++jj) a = fma(ps[r * kPs + jj], static_cast<double>(vs[jj * d + c]), a);
        acc[u] = a;
      }
    }
  }
  ErrorSums es;
  if (live) {
    float* err = p.o_error ? p.o_error + ((static_cast<long long>(b) * p.Hq + h) * p.Nq + i) * d : nullptr;
#pragma unroll
    for (int u = 0; u < kCols; ++u) {
      const int c = lane8 + u * kLanes;
      if (c < d) {
        const double e = static_cast<double>(load(og + static_cast<long long>(i) * p.o.sn + c)) - acc[u] / l;
        es.add(e);
        if (err) err[c] = static_cast<float>(e);
      }
    }
  }
  es.warp_sum();
  __syncthreads();
  if (t % 32 == 0) blk.add(es);
  if (live && lane8 == 0) {
    atomicAdd(&blk_rows, 1ull);
    if (ties >= 2) {
      atomicAdd(&blk_rep, 1ull);
      if (max32 == 0.f) atomicAdd(&blk_zero, 1ull);
    }
    atomicMax(&blk_lmax, float_key(max32));
  }
  __syncthreads();
  if (t == 0) {
    DeviceHeadCounters* c = p.counters + h;
    blk.flush(&c->o_err_sum, &c->o_err_sumsq, &c->o_err_count, &c->o_err_pos, &c->o_err_neg);
    atomicAdd(&c->rows, blk_rows);
    atomicAdd(&c->repeated_max_rows, blk_rep);
    atomicAdd(&c->zero_max_repeated_rows, blk_zero);
    if (blk_lmax) atomicMax(&c->logit_max_key, blk_lmax);
  }
}

struct BwdParams {
  ObservedView dout;
  const float* o_error;
  int Hq, Nq, d;
  unsigned long long head_mask;
  DeviceHeadCounters* counters;
};

constexpr int kBwdWarps = 8;

template <typename T>
__global__ void __launch_bounds__(kBwdWarps * 32) observe_backward_kernel(BwdParams p) {
  const int h = blockIdx.y, b = blockIdx.z;
  if (p.head_mask && !((p.head_mask >> h) & 1ull)) return;
  __shared__ BlockErrorSums blk;
  if (threadIdx.x == 0) blk.clear();
  __syncthreads();
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, i = blockIdx.x * kBwdWarps + w;
  ErrorSums es;
  if (i < p.Nq) {
    const T* g = static_cast<const T*>(p.dout.ptr) + b * p.dout.sb + h * p.dout.sh + static_cast<long long>(i) * p.dout.sn;
    const float* e = p.o_error + ((static_cast<long long>(b) * p.Hq + h) * p.Nq + i) * p.d;
    double s = 0.0;
    for (int c = lane; c < p.d; c += 32) s = fma(static_cast<double>(load(g + c)), static_cast<double>(e[c]), s);
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) es.add(s);
  }
  es.warp_sum();
  if (lane == 0) blk.add(es);
  __syncthreads();
  if (threadIdx.x == 0) {
    DeviceHeadCounters* c = p.counters + h;
    blk.flush(&c->delta_err_sum, &c->delta_err_sumsq, &c->delta_err_count, &c->delta_err_pos, &c->delta_err_neg);
  }
}

void check_view(const ObservedView& v, const char* name) {
  if (!v.ptr) throw InvalidArgument(std::string("observer: ") + name + " is missing");
}

std::size_t forward_smem(int d) {
  return sizeof(double) * kRows * kPs + sizeof(float) * (kRows * (d + 1) + kKeys * (d + 1) + kKeys * d);
}

}  // namespace

void observe_forward(const ObserveForwardArgs& a) {
  const ObservedCall& c = a.shape;
  check_observed_call(c, false);
  check_view(a.q, "q"), check_view(a.k, "k"), check_view(a.v, "v"), check_view(a.o, "o (the kernel's output)");
  if (!a.counters) throw InvalidArgument("observer: no counters to add to");
  if (c.d > kMaxD) throw InvalidArgument("observer: head dim " + std::to_string(c.d) + " (the CUDA observer takes up to 256)");
  FwdParams p{a.q, a.k, a.v, a.o, static_cast<int>(c.Hq), static_cast<int>(c.Hq / c.Hkv), static_cast<int>(c.Nq),
              static_cast<int>(c.Nk), static_cast<int>(c.d), c.causal,
              c.scale > 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.d)), c.head_mask, a.o_error, a.counters};
  const dim3 grid(static_cast<unsigned>((c.Nq + kRows - 1) / kRows), static_cast<unsigned>(c.Hq),
                  static_cast<unsigned>(c.observed_batches()));
  const std::size_t smem = forward_smem(p.d);
  auto* s = static_cast<cudaStream_t>(a.stream);
  if (a.type == ObservedType::bf16) {
    LPDIAG_CUDA_CHECK(cudaFuncSetAttribute(observe_forward_kernel<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
    observe_forward_kernel<__nv_bfloat16><<<grid, kThreads, smem, s>>>(p);
  } else {
    LPDIAG_CUDA_CHECK(cudaFuncSetAttribute(observe_forward_kernel<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
    observe_forward_kernel<__half><<<grid, kThreads, smem, s>>>(p);
  }
  LPDIAG_CUDA_CHECK(cudaGetLastError());
}

void observe_backward(const ObserveBackwardArgs& a) {
  check_view(a.dout, "dO");
  if (!a.o_error || !a.counters) throw InvalidArgument("observer: the backward needs the forward's O error and the counters");
  if (a.batches < 1 || a.Hq < 1 || a.Nq < 1 || a.d < 1) throw InvalidArgument("observer: every dimension must be positive");
  BwdParams p{a.dout, a.o_error, static_cast<int>(a.Hq), static_cast<int>(a.Nq), static_cast<int>(a.d), a.head_mask, a.counters};
  const dim3 grid(static_cast<unsigned>((a.Nq + kBwdWarps - 1) / kBwdWarps), static_cast<unsigned>(a.Hq),
                  static_cast<unsigned>(a.batches));
  auto* s = static_cast<cudaStream_t>(a.stream);
  if (a.type == ObservedType::bf16) observe_backward_kernel<__nv_bfloat16><<<grid, kBwdWarps * 32, 0, s>>>(p);
  else observe_backward_kernel<__half><<<grid, kBwdWarps * 32, 0, s>>>(p);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lpdiag::cuda
