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

enum class EngineChoice { automatic, mma, wgmma };

// The value of the variable `var` (null or empty: not set); throws on anything else.
inline EngineChoice parse_engine_choice(const char* var, const char* value) {
  const std::string v = value == nullptr ? "" : value;
  if (v.empty() || v == "auto") return EngineChoice::automatic;
  if (v == "mma") return EngineChoice::mma;
  if (v == "wgmma") return EngineChoice::wgmma;
  throw Error(std::string(var) + " must be auto, mma or wgmma, got '" + v + "'");
}

// Whether the direction named by `var` runs on the wgmma kernels.
inline bool use_wgmma(const char* var) {
  switch (parse_engine_choice(var, std::getenv(var))) {
    case EngineChoice::mma: return false;
    case EngineChoice::automatic: return wgmma_unavailable().empty();
    case EngineChoice::wgmma: break;
  }
  const std::string why = wgmma_unavailable();
  if (!why.empty()) throw Error(std::string(var) + "=wgmma: " + why + "; or set " + var + "=auto");
  return true;
}

// Query rows per block of the wgmma forward: 64 at d = 64 and 128 at d = 128 (the faster of the
// two on the H200, docs/results/performance.md), or `value` (LPDIAG_FLASH_FWD_ROWS) = 64 or 128.
inline int parse_forward_rows(const char* value, int d) {
  const std::string v = value == nullptr ? "" : value;
  if (v.empty()) return d == 64 ? 64 : 128;
  if (v == "64" || v == "128") return std::stoi(v);
  throw Error("LPDIAG_FLASH_FWD_ROWS must be 64 or 128, got '" + v + "'");
}

inline int wgmma_forward_rows(int d) { return parse_forward_rows(std::getenv("LPDIAG_FLASH_FWD_ROWS"), d); }

}  // namespace lpdiag::cuda::flash
