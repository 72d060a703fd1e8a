// A host vector copied to a new device allocation (the caller frees it): for the small CUDA
// test programs.
#pragma once
#include <cuda_runtime.h>

#include <vector>

template <class T>
T* to_device(const std::vector<T>& h) {
  T* d = nullptr;
  cudaMalloc(&d, h.size() * sizeof(T));
  cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}
