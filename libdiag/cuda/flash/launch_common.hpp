// Argument checks and parameter packing shared by the forward and backward launchers.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "lpdiag/cuda/cuda_check.hpp"
#include "lpdiag/cuda/flash_attention.hpp"
#include "lpdiag/error.hpp"
#include "params.cuh"

namespace lpdiag::cuda::flash {

inline void check_shape(const FlashShape& s) {
  if (s.B <= 0 || s.H <= 0 || s.N <= 0)
    throw Error("flash attention: B, H and N must be positive, got B=" + std::to_string(s.B) + " H=" +
                std::to_string(s.H) + " N=" + std::to_string(s.N));
  if (s.d != 64 && s.d != 128)
    throw Error("flash attention: head dim must be 64 or 128, got " + std::to_string(s.d) +
                "; use the CPU engine for other sizes");
  if (s.N > (1 << 30) || s.B * s.H > 65535)
    throw Error("flash attention: N must be < 2^30 and B*H <= 65535, got N=" + std::to_string(s.N) +
                " B*H=" + std::to_string(s.B * s.H));
}

inline Strided view(const BF16View& v, const char* name) {
  if (!v.ptr) throw Error(std::string("flash attention: ") + name + " is null");
  if (reinterpret_cast<std::uintptr_t>(v.ptr) % 16 != 0 || v.sb % 8 || v.sh % 8 || v.sn % 8)
    throw Error(std::string("flash attention: ") + name +
                " must be 16-byte aligned with strides that are multiples of 8 elements (make it contiguous)");
  return {static_cast<const __nv_bfloat16*>(v.ptr), v.sb, v.sh, v.sn};
}

// An output's view: its strides, or contiguous where they are all zero; aligned as the inputs.
inline OutView out_view(void* ptr, const OutStrides& st, const FlashShape& s, const char* name) {
  if (!ptr) throw Error(std::string("flash attention: ") + name + " is null");
  const bool contiguous = st.sb == 0 && st.sh == 0 && st.sn == 0;
  OutView v{static_cast<__nv_bfloat16*>(ptr), contiguous ? s.H * s.N * s.d : st.sb, contiguous ? s.N * s.d : st.sh,
            contiguous ? s.d : st.sn};
  if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0 || v.sb % 8 || v.sh % 8 || v.sn % 8)
    throw Error(std::string("flash attention: ") + name +
                " must be 16-byte aligned with strides that are multiples of 8 elements");
  return v;
}

inline float scale_of(const FlashShape& s) {
  return s.scale != 0.f ? s.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.d)));
}

inline void require(const void* p, const char* what) {
  if (!p) throw Error(std::string("flash attention: ") + what + " is null");
}

// What the forward's and the backward's parameters share: checks the shape and the q, k, v views.
template <class Params>
void set_shape_and_inputs(Params& p, const FlashShape& s, const BF16View& q, const BF16View& k, const BF16View& v) {
  check_shape(s);
  p.q = view(q, "q");
  p.k = view(k, "k");
  p.v = view(v, "v");
  p.H = static_cast<int>(s.H);
  p.N = static_cast<int>(s.N);
  p.scale = scale_of(s);
}

// Lets `kernel` use `smem` bytes of dynamic shared memory (above the default 48 KB) and asks for
// the largest shared-memory carveout, so that as many blocks fit as the registers allow. Set on
// every launch: function attributes belong to the current device.
template <class Kernel>
void allow_shared_memory(Kernel kernel, int smem) {
  LPDIAG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  LPDIAG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
}

}  // namespace lpdiag::cuda::flash
