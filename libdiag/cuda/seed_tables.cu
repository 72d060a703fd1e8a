// The seed kernels' exp and log tables: every bf16 input x mapped to bf16(expf(x)) and
// bf16(logf(x)) as the CPU engine computes them (the same libm calls, the same rounding), on each
// device once, on first use. In the seed policy both functions only ever see bf16 values, so the
// kernels' exp and log are the emulation's exactly.
#include <cuda_runtime.h>

#include <cmath>
#include <map>
#include <mutex>
#include <vector>

#include "lpdiag/cuda/cuda_check.hpp"
#include "lpdiag/numerics/convert.hpp"
#include "seed/seed_tables.hpp"

namespace lpdiag::cuda::seed {

Tables tables_for_current_device() {
  static std::mutex mu;
  static std::map<int, Tables> made;
  int dev = 0;
  LPDIAG_CUDA_CHECK(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mu);
  if (auto it = made.find(dev); it != made.end()) return it->second;
  std::vector<std::uint16_t> host(2 * 65536);
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float x = bf16_to_float(static_cast<std::uint16_t>(b));
    host[b] = bf16_bits_rne(round_bf16(std::exp(x)));
    host[65536 + b] = bf16_bits_rne(round_bf16(std::log(x)));
  }
  void* d = nullptr;
  LPDIAG_CUDA_CHECK(cudaMalloc(&d, host.size() * 2));  // kept for the process's life
  LPDIAG_CUDA_CHECK(cudaMemcpy(d, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
  const auto* t = static_cast<const std::uint16_t*>(d);
  return made[dev] = Tables{t, t + 65536, 0u};  // the launchers set exp_window
}

}  // namespace lpdiag::cuda::seed
