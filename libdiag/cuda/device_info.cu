#include <string>

#include "lpdiag/cuda/cuda_check.hpp"
#include "lpdiag/cuda/device.hpp"

namespace lpdiag::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string device_name() {
  cudaDeviceProp p{};
  LPDIAG_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ")";
}

}  // namespace lpdiag::cuda
