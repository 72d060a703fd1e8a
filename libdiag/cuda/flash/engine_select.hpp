// Host-side choice between the mma.sync kernels (sm_80 and up) and the wgmma kernels (Hopper).
// Per direction, the environment variables LPDIAG_FLASH_FORWARD and LPDIAG_FLASH_BACKWARD take
// `auto` (the default: wgmma where it can run), `mma` or `wgmma`. wgmma needs a build with an
// sm_90a image (CMAKE_CUDA_ARCHITECTURES containing 90a, the default, defines LPDIAG_HAVE_SM90A)
// and a device of compute capability 9.0; asking for it without them is an error.
#pragma once
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "lpdiag/cuda/cuda_check.hpp"
#include "lpdiag/error.hpp"

namespace lpdiag::cuda::flash {

// Why the wgmma kernels cannot run here, or empty when they can.
inline std::string wgmma_unavailable() {
#ifndef LPDIAG_HAVE_SM90A
  return "this build has no sm_90a image; configure with CMAKE_CUDA_ARCHITECTURES containing 90a (e.g. \"80;90a\")";
#else
  int dev = 0, major = 0, minor = 0;
  LPDIAG_CUDA_CHECK(cudaGetDevice(&dev));
  LPDIAG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  LPDIAG_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major != 9 || minor != 0)
    return "it needs a compute capability 9.0 device, this one is " + std::to_string(major) + "." + std::to_string(minor);
  return {};
#endif
}

// Whether the direction named by `var` runs on the wgmma kernels.
inline bool use_wgmma(const char* var) {
  const char* e = std::getenv(var);
  const std::string v = e == nullptr ? "" : e;
  if (v == "mma") return false;
  if (v.empty() || v == "auto") return wgmma_unavailable().empty();
  if (v != "wgmma") throw Error(std::string(var) + " must be auto, mma or wgmma, got '" + v + "'");
  const std::string why = wgmma_unavailable();
  if (!why.empty()) throw Error(std::string(var) + "=wgmma: " + why + "; or set " + var + "=auto");
  return true;
}

// Query rows per block and keys per tile of the wgmma forward: 64 x 64 at d = 64 and 128 x 64 at
// d = 128 (the fastest on the H200, docs/BENCHMARKS.md), or for benchmarks
// LPDIAG_FLASH_FWD_TILE = 128x64, 64x64 or 64x128.
struct WgmmaTile {
  int rows, keys;
};
inline WgmmaTile wgmma_forward_tile(int d) {
  const char* e = std::getenv("LPDIAG_FLASH_FWD_TILE");
  const std::string v = e == nullptr ? "" : e;
  if (v.empty()) return d == 64 ? WgmmaTile{64, 64} : WgmmaTile{128, 64};
  if (v == "128x64") return {128, 64};
  if (v == "64x64") return {64, 64};
  if (v == "64x128") return {64, 128};
  throw Error("LPDIAG_FLASH_FWD_TILE must be 128x64, 64x64 or 64x128 (query rows x keys), got '" + v + "'");
}

}  // namespace lpdiag::cuda::flash
