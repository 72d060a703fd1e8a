// Copying `Rows` rows of a (N x D) bf16 head into shared memory with cp.async, 16 bytes per
// thread and step; rows past n become zeros. The shared layout is the one thing that differs
// between the kernels, so it is a parameter: Layout::offset(r, c) is the element offset of row
// r, column c (c a multiple of 8).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "mma.cuh"

namespace lpdiag::cuda::flash {

// Whole rows of D columns, XOR-swizzled (the mma.sync kernels' ldmatrix tiles).
template <int D, int Rows>
struct SwizzledRows {
  static __device__ __forceinline__ int offset(int r, int c) { return swz<D>(r, c); }
};

// 64-column panels [D / 64][Rows][64], each with the 128-byte swizzle (the wgmma kernels' tiles).
template <int D, int Rows>
struct Panels64 {
  static __device__ __forceinline__ int offset(int r, int c) { return (c / 64) * Rows * 64 + swz<64>(r, c % 64); }
};

template <template <int, int> class Layout, int D, int Rows, int Threads>
__device__ __forceinline__ void copy_rows(__nv_bfloat16* dst, const __nv_bfloat16* src, std::int64_t sn, int row0, int n) {
  constexpr int kChunks = Rows * D / 8;
  static_assert(kChunks % Threads == 0, "tile copy must divide evenly among threads");
#pragma unroll
  for (int x = 0; x < kChunks / Threads; ++x) {
    const int idx = threadIdx.x + x * Threads;
    const int r = idx / (D / 8), c = (idx % (D / 8)) * 8;
    const int gr = row0 + r;
    const bool ok = gr < n;
    const __nv_bfloat16* g = src + (ok ? gr : 0) * sn + c;
    cp_async16(smem_addr(dst + Layout<D, Rows>::offset(r, c)), g, ok ? 16 : 0);
  }
}

template <int D, int Rows, int Threads>
__device__ __forceinline__ void load_tile(__nv_bfloat16* dst, const __nv_bfloat16* src, std::int64_t sn, int row0, int n) {
  copy_rows<SwizzledRows, D, Rows, Threads>(dst, src, sn, row0, n);
}

template <int D, int Rows, int Threads>
__device__ __forceinline__ void load_panels(__nv_bfloat16* dst, const __nv_bfloat16* src, std::int64_t sn, int row0, int n) {
  copy_rows<Panels64, D, Rows, Threads>(dst, src, sn, row0, n);
}

}  // namespace lpdiag::cuda::flash
