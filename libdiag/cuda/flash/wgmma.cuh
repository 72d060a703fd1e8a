// Hopper warpgroup MMA (wgmma, sm_90a): shared-memory descriptors, the fences, and the shapes
// the attention kernels use. Accumulators are float[n8 tiles][4] in the same per-thread layout as
// mma.sync's C fragments (warp w of the warpgroup holds rows 16 w .. 16 w + 15; element e of
// tile t is row lane / 4 + 8 (e / 2), column 8 t + 2 (lane % 4) + (e % 2)), and a register A
// operand is mma.sync's A fragment, so c_to_a feeds P-bar straight in (PTX ISA, "Register
// Fragments" of wgmma.mma_async.m64nNk16).
// Shared operands use the 128-byte swizzle, which is swz<64> on tiles of 64 bf16 columns
// (16-byte chunk ^= row % 8, tile base 1024-byte aligned):
//   K-major (S = Q K^T: Q rows x d, K keys x d): SBO = 1024 (8 rows), LBO unused; a k16 step
//   advances the start by 32 bytes inside the 64-column panel, then moves to the next panel.
//   MN-major (P-bar V with trans-b: V keys x d): SBO = 1024 (8 keys), LBO = the byte distance
//   between 64-column panels of d; a k16 step advances the start by 16 keys x 128 bytes.
// Compiled only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); elsewhere the wrappers trap.
#pragma once
#include <cstdint>

namespace lpdiag::cuda::flash::wg {

// Bytes per row of a 64-column bf16 panel: the 128-byte swizzle's row.
constexpr std::uint32_t kPanelRow = 128;

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LPDIAG_WGMMA 1
#else
#define LPDIAG_WGMMA 0
#endif

__device__ __forceinline__ std::uint64_t desc_sw128(std::uint32_t smem_byte_addr, std::uint32_t lbo_bytes) {
  return static_cast<std::uint64_t>((smem_byte_addr & 0x3FFFFu) >> 4) |
         (static_cast<std::uint64_t>((lbo_bytes >> 4) & 0x3FFFu) << 16) | (static_cast<std::uint64_t>(1024u >> 4) << 32) |
         (static_cast<std::uint64_t>(1) << 62);
}

__device__ __forceinline__ void fence() {
#if LPDIAG_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void commit() {
#if LPDIAG_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wait() {
#if LPDIAG_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Writes by ordinary stores and cp.async become visible to wgmma's (async-proxy) reads.
__device__ __forceinline__ void fence_proxy_async() {
#if LPDIAG_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// Keeps the compiler from moving accesses of an accumulator across the asynchronous MMA.
template <int T>
__device__ __forceinline__ void fence_operand(float (&d)[T][4]) {
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[t][e])::"memory");
}

// d += op(A) op(B), m64nNk16, A and B in shared memory; TA (TB) = 0: A (B) K-major, 1: A
// M-major (B N-major).
template <int TA, int TB>
__device__ __forceinline__ void ss_m64n64k16(float (&d)[8][4], std::uint64_t da, std::uint64_t db) {
#if LPDIAG_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %34, %35;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "l"(da), "l"(db), "n"(TA), "n"(TB));
#else
  (void)d, (void)da, (void)db;
  __trap();
#endif
}

template <int TA, int TB>
__device__ __forceinline__ void ss_m64n128k16(float (&d)[16][4], std::uint64_t da, std::uint64_t db) {
#if LPDIAG_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %66, %67;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "l"(da), "l"(db), "n"(TA), "n"(TB));
#else
  (void)d, (void)da, (void)db;
  __trap();
#endif
}

// The shared-memory product for N = 64 or 128.
template <int N, int TA, int TB>
__device__ __forceinline__ void ss(float (&d)[N / 8][4], std::uint64_t da, std::uint64_t db) {
  if constexpr (N == 64) ss_m64n64k16<TA, TB>(d, da, db);
  else ss_m64n128k16<TA, TB>(d, da, db);
}

// d += A B, m64nNk16, A in registers (mma.sync's A fragment), B in shared memory N-major.
__device__ __forceinline__ void rs_m64n64k16_tb(float (&d)[8][4], const std::uint32_t (&a)[4], std::uint64_t db) {
#if LPDIAG_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
#else
  (void)d, (void)a, (void)db;
  __trap();
#endif
}

__device__ __forceinline__ void rs_m64n128k16_tb(float (&d)[16][4], const std::uint32_t (&a)[4], std::uint64_t db) {
#if LPDIAG_WGMMA
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
#else
  (void)d, (void)a, (void)db;
  __trap();
#endif
}

// The same for register A operands: they must stay unchanged until the wait.
template <int T>
__device__ __forceinline__ void fence_operand(std::uint32_t (&a)[T][4]) {
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[t][e])::"memory");
}

// P-bar V for a head dim of D = 64 or 128 in one instruction.
template <int D>
__device__ __forceinline__ void rs_pv(float (&d)[D / 8][4], const std::uint32_t (&a)[4], std::uint64_t db) {
  if constexpr (D == 64) rs_m64n64k16_tb(d, a, db);
  else rs_m64n128k16_tb(d, a, db);
}

}  // namespace lpdiag::cuda::flash::wg
