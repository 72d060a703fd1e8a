// gpu (sm_90a): the wgmma operand layouts the Hopper attention kernels rely on, one product at a
// time on small-integer matrices (every product and sum exact in fp32), against the CPU:
//   ss:  D = A B^T, A and B K-major in 64-column panels (S = Q K^T, S^T = K Q^T), N = 64, K = 64, 128
//   rs:  D = A B,  A from registers as mma.sync A fragments, B N-major (P-bar V, dV, dK), N = 64, 128
//   tt:  D = A B,  A M-major (stored transposed), B N-major (dQ = dS K), N = 64, 128
// It uses the kernels' own helpers (load_panels, desc_sw128, the wgmma wrappers), so a wrong
// descriptor shows here as a wrong matrix, not as a wrong attention output.
// Exits 77 (skipped) without a compute-capability-9.0 device or without an sm_90a build.
#include <cuda_runtime.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "flash/forward_wgmma_kernel.cuh"
#include "flash/mma.cuh"
#include "to_device.hpp"
#include "flash/wgmma.cuh"
#include "test_seed.hpp"

namespace fl = lpdiag::cuda::flash;

namespace {

constexpr int kRow = fl::wg::kPanelRow;

__device__ void store_acc(float* d, int n_cols, const float (*acc)[4], int tiles) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int t = 0; t < tiles; ++t)
    for (int e = 0; e < 4; ++e) {
      const int r = warp * 16 + lane / 4 + 8 * (e / 2), c = t * 8 + 2 * (lane % 4) + (e % 2);
      d[r * n_cols + c] = acc[t][e];
    }
}

// The tiles' cp.async copies have landed and are visible to wgmma.
__device__ void tiles_landed() {
  fl::cp_async_commit();
  fl::cp_async_wait<0>();
  fl::wg::fence_proxy_async();
  __syncthreads();
}

// Waits for the committed MMAs and stores the 64 x N accumulator.
template <int N>
__device__ void finish(float* d, float (&acc)[N / 8][4]) {
  fl::wg::commit();
  fl::wg::wait<0>();
  fl::wg::fence_operand(acc);
  store_acc(d, N, acc, N / 8);
}

// D (64 x N) = A (64 x K) B^T, B (N x K): both K-major panels.
template <int K, int N>
__global__ void ss_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d) {
  extern __shared__ __align__(128) unsigned char raw[];
  auto* as = reinterpret_cast<__nv_bfloat16*>(fl::align_smem(raw));
  __nv_bfloat16* bs = as + 64 * K;
  fl::load_panels<K, 64, 128>(as, a, K, 0, 64);
  fl::load_panels<K, N, 128>(bs, b, K, 0, N);
  tiles_landed();
  float acc[N / 8][4];
  fl::zero_tiles(acc);
  fl::wg::fence_operand(acc);
  fl::wg::fence();
  for (int kc = 0; kc < K / 16; ++kc) {
    const std::uint32_t in = (kc % 4) * 32;
    fl::wg::ss<N, 0, 0>(acc, fl::wg::desc_sw128(fl::smem_addr(as) + (kc / 4) * 64 * kRow + in, 16),
                        fl::wg::desc_sw128(fl::smem_addr(bs) + (kc / 4) * N * kRow + in, 16));
  }
  finish<N>(d, acc);
}

// D (64 x N) = A (64 x 64) B (64 x N): A from registers, B N-major panels [N / 64][64][64].
template <int N>
__global__ void rs_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d) {
  extern __shared__ __align__(128) unsigned char raw[];
  auto* bs = reinterpret_cast<__nv_bfloat16*>(fl::align_smem(raw));
  fl::load_panels<N, 64, 128>(bs, b, N, 0, 64);
  tiles_landed();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  std::uint32_t frag[4][4];
  auto pair = [&](int r, int c) {
    __nv_bfloat162 v;
    v.x = a[r * 64 + c];
    v.y = a[r * 64 + c + 1];
    return *reinterpret_cast<std::uint32_t*>(&v);
  };
  for (int kc = 0; kc < 4; ++kc) {
    const int r = warp * 16 + lane / 4, c = kc * 16 + 2 * (lane % 4);
    frag[kc][0] = pair(r, c);
    frag[kc][1] = pair(r + 8, c);
    frag[kc][2] = pair(r, c + 8);
    frag[kc][3] = pair(r + 8, c + 8);
  }
  float acc[N / 8][4];
  fl::zero_tiles(acc);
  fl::wg::fence_operand(acc);
  fl::wg::fence_operand(frag);
  fl::wg::fence();
  for (int kc = 0; kc < 4; ++kc) fl::wg::rs_pv<N>(acc, frag[kc], fl::wg::desc_sw128(fl::smem_addr(bs) + kc * 16 * kRow, 64 * kRow));
  finish<N>(d, acc);
  fl::wg::fence_operand(frag);
}

// D (64 x N) = A (64 x 64) B (64 x N): A given transposed (at = A^T, 64 x 64) and read M-major,
// B N-major panels.
template <int N>
__global__ void tt_kernel(const __nv_bfloat16* at, const __nv_bfloat16* b, float* d) {
  extern __shared__ __align__(128) unsigned char raw[];
  auto* as = reinterpret_cast<__nv_bfloat16*>(fl::align_smem(raw));
  __nv_bfloat16* bs = as + 64 * 64;
  fl::load_panels<64, 64, 128>(as, at, 64, 0, 64);
  fl::load_panels<N, 64, 128>(bs, b, N, 0, 64);
  tiles_landed();
  float acc[N / 8][4];
  fl::zero_tiles(acc);
  fl::wg::fence_operand(acc);
  fl::wg::fence();
  for (int kc = 0; kc < 4; ++kc)
    fl::wg::ss<N, 1, 1>(acc, fl::wg::desc_sw128(fl::smem_addr(as) + kc * 16 * kRow, 16),
                     fl::wg::desc_sw128(fl::smem_addr(bs) + kc * 16 * kRow, 64 * kRow));
  finish<N>(d, acc);
}

std::vector<__nv_bfloat16> random_ints(std::size_t n, std::mt19937& rng, std::vector<float>& as_float) {
  std::uniform_int_distribution<int> v(-3, 3);
  std::vector<__nv_bfloat16> out(n);
  as_float.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    as_float[i] = static_cast<float>(v(rng));
    out[i] = __float2bfloat16(as_float[i]);
  }
  return out;
}

int failures = 0;

// Runs kernel(a, b, d) and compares d (64 x n) with want; reports the first mismatches.
template <class Kernel>
void check(const std::string& what, Kernel kernel, int smem, const std::vector<__nv_bfloat16>& a,
           const std::vector<__nv_bfloat16>& b, const std::vector<float>& want, int n) {
  __nv_bfloat16 *da = to_device(a), *db = to_device(b);
  float* dd = nullptr;
  cudaMalloc(&dd, want.size() * sizeof(float));
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  kernel<<<1, 128, smem>>>(da, db, dd);
  const cudaError_t err = cudaDeviceSynchronize();
  std::vector<float> got(want.size());
  cudaMemcpy(got.data(), dd, got.size() * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(da), cudaFree(db), cudaFree(dd);
  if (err != cudaSuccess) {
    std::printf("FAIL %s: %s\n", what.c_str(), cudaGetErrorString(err));
    ++failures;
    return;
  }
  int bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i] && bad++ < 4)
      std::printf("  %s: D[%zu][%zu] = %g, want %g\n", what.c_str(), i / n, i % n, got[i], want[i]);
  std::printf("%s %s: %d of %zu elements differ\n", bad ? "FAIL" : "ok  ", what.c_str(), bad, want.size());
  failures += bad != 0;
}

template <int K, int N>
void run_ss(std::mt19937& rng) {
  std::vector<float> af, bf;
  const auto a = random_ints(64 * K, rng, af), b = random_ints(N * K, rng, bf);
  std::vector<float> want(64 * N, 0.f);
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < N; ++j)
      for (int k = 0; k < K; ++k) want[i * N + j] += af[i * K + k] * bf[j * K + k];
  check("ss K=" + std::to_string(K) + " N=" + std::to_string(N), ss_kernel<K, N>, (64 + N) * K * 2 + fl::kSmemAlign, a, b,
        want, N);
}

template <int N>
void run_rs_tt(std::mt19937& rng) {
  std::vector<float> af, bf;
  const auto a = random_ints(64 * 64, rng, af), b = random_ints(64 * N, rng, bf);
  std::vector<float> want(64 * N, 0.f);
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < N; ++j)
      for (int k = 0; k < 64; ++k) want[i * N + j] += af[i * 64 + k] * bf[k * N + j];
  check("rs N=" + std::to_string(N), rs_kernel<N>, 64 * N * 2 + fl::kSmemAlign, a, b, want, N);
  std::vector<__nv_bfloat16> at(64 * 64);
  for (int i = 0; i < 64; ++i)
    for (int k = 0; k < 64; ++k) at[k * 64 + i] = a[i * 64 + k];
  check("tt N=" + std::to_string(N), tt_kernel<N>, (64 * 64 + 64 * N) * 2 + fl::kSmemAlign, at, b, want, N);
}

}  // namespace

int main() {
  int count = 0, major = 0, minor = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::puts("SKIP: no CUDA device visible");
    return 77;
  }
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
#ifndef LPDIAG_HAVE_SM90A
  std::puts("SKIP: built without an sm_90a image (CMAKE_CUDA_ARCHITECTURES has no 90a)");
  return 77;
#endif
  if (major != 9 || minor != 0) {
    std::printf("SKIP: wgmma needs compute capability 9.0, this device is %d.%d\n", major, minor);
    return 77;
  }
  std::mt19937 rng(lpdiag_test::seed("test_wgmma_layouts#31", 1245492u));
  run_ss<64, 64>(rng);
  run_ss<128, 64>(rng);
  run_rs_tt<64>(rng);
  run_rs_tt<128>(rng);
  std::printf("%s: %d failing products\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
