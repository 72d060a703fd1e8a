// Thin wrappers over the warp-level instructions the FlashAttention kernels use: ldmatrix,
// mma.sync m16n8k16 (bf16 in, fp32 accumulate), cp.async. Fragment layouts are PTX's:
//   A (16x16): a0 = (r, c..c+1), a1 = (r+8, c..), a2 = (r, c+8..), a3 = (r+8, c+8..)
//   B (16x8):  b0 = (k = c..c+1, n = r), b1 = (k = c+8.., n = r)
//   C (16x8):  c0,c1 = (r, c..c+1), c2,c3 = (r+8, c..c+1)
// with r = lane / 4 and c = 2 * (lane % 4). A C tile pair is therefore an A fragment.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace lpdiag::cuda::flash {

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a * b
__device__ __forceinline__ void mma_bf16(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c[2np] += a * (b[0], b[1]) and c[2np + 1] += a * (b[2], b[3]): the two n8 tiles one
// ldmatrix_x4 of B fragments feeds.
template <int T>
__device__ __forceinline__ void mma_bf16_pair(float (&c)[T][4], int np, const std::uint32_t (&a)[4],
                                              const std::uint32_t (&b)[4]) {
  mma_bf16(c[2 * np], a, b[0], b[1]);
  mma_bf16(c[2 * np + 1], a, b[2], b[3]);
}

// Zeroes an accumulator of T n8 tiles.
template <int T>
__device__ __forceinline__ void zero_tiles(float (&c)[T][4]) {
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) c[t][e] = 0.f;
}

// 16 bytes global -> shared; src_bytes < 16 zero-fills the rest (0 for rows past the end).
__device__ __forceinline__ void cp_async16(std::uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Two fp32 values to a bf16x2 register, nearest-even; lo lands in the low half (lower column).
__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

__device__ __forceinline__ float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Element (row, col) of a shared tile of `D` bf16 columns whose 16-byte chunks are XOR-swizzled
// by row so that ldmatrix's eight row reads hit eight different bank groups.
template <int D>
__device__ __forceinline__ int swz(int row, int col) {
  return row * D + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

// One lane's byte offsets for the three fragment loads from a swz<Cols> tile, with the loop
// index kept out of the lane's part so that a loop pays one XOR per index (ncu: the address
// arithmetic was ~35% of the backward's instructions):
//   a:    ldmatrix_x4       -> A fragment, rows [row0, row0 + 16), columns [16 k, 16 k + 16):
//         row0 * kRow + (a ^ (k << 5))
//   b_nk: ldmatrix_x4       -> B fragments of n-tiles nt, nt + 1 (tile rows n, columns k):
//         nt * 8 * kRow + (b_nk ^ (k << 5))
//   b_kn: ldmatrix_x4_trans -> B fragments of n-tiles 2 np, 2 np + 1 (tile rows k, columns n):
//         k * 16 * kRow + (b_kn ^ (np << 5))
// In the B loads registers 0-1 belong to the first n-tile and 2-3 to the second. Exact because a
// lane's swizzled chunk is (2 k + c) ^ (row & 7) with c in {0, 1} and row & 7 = lane % 8 (row0
// and nt * 8 are multiples of 8), which is 2 k ^ (c ^ lane % 8), and 2 k << 4 = k << 5 touches
// only the chunk bits, below one row. The offsets may equally be XORed on absolute addresses
// when the tile starts on a kRow boundary (align_smem).
template <int Cols>
struct LaneFrag {
  static constexpr std::uint32_t kRow = Cols * 2;  // bytes per tile row
  std::uint32_t a, b_nk, b_kn;
  __device__ explicit LaneFrag(int lane) {
    const std::uint32_t r = lane % 8, c16 = lane / 16, c8 = (lane / 8) & 1;
    a = (lane % 16) * kRow + ((c16 ^ r) << 4);
    b_nk = (c16 * 8 + r) * kRow + ((c8 ^ r) << 4);
    b_kn = (c8 * 8 + r) * kRow + ((c16 ^ r) << 4);
  }
};

// The chunk part of a LaneFrag address for loop index k.
__device__ __forceinline__ std::uint32_t chunk_xor(std::uint32_t lane_addr, int k) {
  return lane_addr ^ (static_cast<std::uint32_t>(k) << 5);
}

// Dynamic shared memory rounded up to a kSmemAlign boundary (launchers allocate kSmemAlign more),
// so that every tile starts on a row boundary and LaneFrag offsets XOR onto absolute addresses.
constexpr int kSmemAlign = 1024;
__device__ __forceinline__ unsigned char* align_smem(unsigned char* p) {
  const std::uint32_t a = smem_addr(p);
  return p + ((kSmemAlign - (a & (kSmemAlign - 1))) & (kSmemAlign - 1));
}

// p[0] += a, p[1] += b atomically (p 8-byte aligned): one vector reduction on sm_90, where
// the dQ atomics were ~10% of the backward's stall samples as scalars; two scalar ones before.
// (A float4 version, lane pairs swapping halves, measured no faster on the H200.)
__device__ __forceinline__ void atomic_add_pair(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(a, b));
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

constexpr float kLog2e = 1.4426950408889634f;

// 2^x, the MUFU approximation (rel. error ~2^-22), flushing subnormal results to zero.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// e^x as FlashAttention-2 takes it on the GPU: 2^(x log2 e) on the MUFU, two instructions
// against eight for the accurate expf. Exact where the softmax needs it: e^0 = 1 and e^-inf = 0.
__device__ __forceinline__ float exp_mufu(float x) { return exp2_approx(__fmul_rn(x, kLog2e)); }

// Columns [16 kc, 16 kc + 16) of C tiles (8 columns each), rounded to bf16, as an A fragment:
// the register reuse that feeds P-bar (and dS) into the next product.
template <int T>
__device__ __forceinline__ void c_to_a(std::uint32_t (&a)[4], const float (&c)[T][4], int kc) {
  a[0] = pack_bf16(c[2 * kc][0], c[2 * kc][1]);
  a[1] = pack_bf16(c[2 * kc][2], c[2 * kc][3]);
  a[2] = pack_bf16(c[2 * kc + 1][0], c[2 * kc + 1][1]);
  a[3] = pack_bf16(c[2 * kc + 1][2], c[2 * kc + 1][3]);
}

// The same columns' rounding residuals x - bf16(x), rounded to bf16: with c_to_a, x in two terms.
template <int T>
__device__ __forceinline__ void c_to_a_residual(std::uint32_t (&a)[4], const float (&c)[T][4], int kc) {
  auto r = [](float x) { return x - bf16_round(x); };
  a[0] = pack_bf16(r(c[2 * kc][0]), r(c[2 * kc][1]));
  a[1] = pack_bf16(r(c[2 * kc][2]), r(c[2 * kc][3]));
  a[2] = pack_bf16(r(c[2 * kc + 1][0]), r(c[2 * kc + 1][1]));
  a[3] = pack_bf16(r(c[2 * kc + 1][2]), r(c[2 * kc + 1][3]));
}

}  // namespace lpdiag::cuda::flash
