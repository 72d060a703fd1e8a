// Host-side choice of the wgmma kernels while they are new: opt-in per direction through an
// environment variable (LPDIAG_FLASH_FORWARD=wgmma, LPDIAG_FLASH_BACKWARD=wgmma). They need a
// build with an sm_90a image (CMAKE_CUDA_ARCHITECTURES containing 90a defines
// LPDIAG_HAVE_SM90A) and a device of compute capability 9.0; asking without them is an error.
#pragma once
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "lpdiag/cuda/cuda_check.hpp"
#include "lpdiag/error.hpp"

namespace lpdiag::cuda::flash {

inline bool wgmma_requested(const char* var) {
  const char* e = std::getenv(var);
  if (e == nullptr || std::string(e).empty() || std::string(e) == "mma") return false;
  if (std::string(e) != "wgmma") throw Error(std::string(var) + " must be mma or wgmma, got '" + e + "'");
#ifndef LPDIAG_HAVE_SM90A
  throw Error(std::string(var) + "=wgmma: this build has no sm_90a image; configure with CMAKE_CUDA_ARCHITECTURES "
              "containing 90a (e.g. \"80;90a\") or unset " + var);
#else
  int dev = 0, major = 0, minor = 0;
  LPDIAG_CUDA_CHECK(cudaGetDevice(&dev));
  LPDIAG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  LPDIAG_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major != 9 || minor != 0)
    throw Error(std::string(var) + "=wgmma needs a compute capability 9.0 device, this one is " + std::to_string(major) +
                "." + std::to_string(minor));
  return true;
#endif
}

// Query rows per block of the wgmma forward (LPDIAG_FLASH_FWD_ROWS, 64 or 128; default 128), a
// tuning knob for benchmarks.
inline int wgmma_forward_rows() {
  const char* e = std::getenv("LPDIAG_FLASH_FWD_ROWS");
  if (e == nullptr || std::string(e).empty()) return 128;
  if (std::string(e) == "64") return 64;
  if (std::string(e) == "128") return 128;
  throw Error(std::string("LPDIAG_FLASH_FWD_ROWS must be 64 or 128, got '") + e + "'");
}

}  // namespace lpdiag::cuda::flash
