// fp32 -> bf16 with the hardware's round-to-nearest-even, the independent reference for the
// CPU conversion. Kernel -> launcher -> entry.
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

#include "lpdiag/cuda/cuda_check.hpp"
#include "lpdiag/cuda/device.hpp"

namespace lpdiag::cuda {
namespace {

__global__ void float_to_bf16_kernel(const float* in, std::uint16_t* out, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const __nv_bfloat16 b = __float2bfloat16_rn(in[i]);
    std::uint16_t bits;
    memcpy(&bits, &b, sizeof bits);
    out[i] = bits;
  }
}

void launch_float_to_bf16(const float* in, std::uint16_t* out, std::size_t n, cudaStream_t s) {
  const int threads = 256;
  const std::size_t want = (n + threads - 1) / threads;
  const int blocks = static_cast<int>(want < 65535 ? (want ? want : 1) : 65535);
  float_to_bf16_kernel<<<blocks, threads, 0, s>>>(in, out, n);
  LPDIAG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void float_to_bf16_rn(const float* host_in, std::uint16_t* host_out, std::size_t n) {
  if (n == 0) return;
  float* d_in = nullptr;
  std::uint16_t* d_out = nullptr;
  LPDIAG_CUDA_CHECK(cudaMalloc(&d_in, n * sizeof(float)));
  try {
    LPDIAG_CUDA_CHECK(cudaMalloc(&d_out, n * sizeof(std::uint16_t)));
    LPDIAG_CUDA_CHECK(cudaMemcpy(d_in, host_in, n * sizeof(float), cudaMemcpyHostToDevice));
    launch_float_to_bf16(d_in, d_out, n, nullptr);
    LPDIAG_CUDA_CHECK(cudaMemcpy(host_out, d_out, n * sizeof(std::uint16_t), cudaMemcpyDeviceToHost));
  } catch (...) {
    cudaFree(d_in);
    cudaFree(d_out);
    throw;
  }
  cudaFree(d_in);
  cudaFree(d_out);
}

}  // namespace lpdiag::cuda
