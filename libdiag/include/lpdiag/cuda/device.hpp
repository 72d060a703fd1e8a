// Host-side entries of libdiag's CUDA code. No CUDA or torch types cross this header.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace lpdiag::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no device (never throws).
int device_count();
// "NVIDIA H200 (sm_90)" for device 0; throws CudaError when there is none.
std::string device_name();

// Converts n floats to bf16 bit patterns on the GPU with __float2bfloat16_rn. Host buffers.
void float_to_bf16_rn(const float* host_in, std::uint16_t* host_out, std::size_t n);

}  // namespace lpdiag::cuda
