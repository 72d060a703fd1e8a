// Which numerics the CUDA kernels implement (flash_attention.hpp, KernelNumerics).
#include <string>

#include "lpdiag/cuda/flash_attention.hpp"
#include "lpdiag/error.hpp"

namespace lpdiag::cuda {

void check_kernel_numerics(const KernelNumerics& n) {
  if (n.policy == Policy::fa2) {
    if (n.key_tile != kernel_key_tile)
      throw InvalidArgument("the fa2 CUDA kernels use key tiles of " + std::to_string(kernel_key_tile) + ", got " +
                            std::to_string(n.key_tile));
    return;
  }
  if (n.policy == Policy::fp32) {
    if (n.key_tile < 64 || n.key_tile > 512 || n.key_tile % 64)
      throw InvalidArgument("the fp32 CUDA kernels take key tiles of 64 to 512 in steps of 64, got " + std::to_string(n.key_tile));
    return;
  }
  if (n.policy == Policy::seed || n.policy == Policy::seed_mma) {
    const std::string which = policy_name(n.policy);
    if (n.key_tile < 64 || n.key_tile > 512 || n.key_tile % 64)
      throw InvalidArgument("the " + which + " CUDA kernels take key tiles of 64 to 512 in steps of 64, got " + std::to_string(n.key_tile));
    if (n.query_tile < 64 || n.query_tile % 64)
      throw InvalidArgument("the " + which + " CUDA kernels take query tiles that are multiples of 64, got " + std::to_string(n.query_tile));
    return;
  }
  throw InvalidArgument(std::string("the CUDA kernels implement the fa2, seed, seed-mma and fp32 policies; '") + policy_name(n.policy) +
                        "' runs on the CPU engine only");
}

}  // namespace lpdiag::cuda
