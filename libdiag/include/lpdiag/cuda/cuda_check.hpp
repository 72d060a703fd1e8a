// The one CUDA error check: names the failed statement, file and line, and throws.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "lpdiag/error.hpp"

namespace lpdiag::cuda {

class CudaError : public Error {
 public:
  using Error::Error;
};

inline void check(cudaError_t status, const char* what, const char* file, int line) {
  if (status != cudaSuccess)
    throw CudaError(std::string(what) + " failed at " + file + ":" + std::to_string(line) + ": " +
                    cudaGetErrorString(status));
}

}  // namespace lpdiag::cuda

#define LPDIAG_CUDA_CHECK(stmt) ::lpdiag::cuda::check((stmt), #stmt, __FILE__, __LINE__)
