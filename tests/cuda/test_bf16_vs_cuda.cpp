// gpu: fp32 -> bf16 nearest-even against CUDA's __float2bfloat16_rn, on every tie/boundary class
// and 1e8 random patterns. Exits 77 (skipped) when no GPU is visible.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "lpdiag/cuda/device.hpp"
#include "lpdiag/numerics/convert.hpp"
#include "test_seed.hpp"

using namespace lpdiag;

static long long compare(const std::vector<std::uint32_t>& p) {
  std::vector<std::uint16_t> gpu(p.size());
  cuda::float_to_bf16_rn(reinterpret_cast<const float*>(p.data()), gpu.data(), p.size());
  const FloatFormat& f = format(FormatId::bf16);
  long long bad = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    float x;
    std::memcpy(&x, &p[i], 4);
    const std::uint16_t ours = bf16_bits_rne(x);
    if (std::isnan(x)) bad += !(is_nan_bits(gpu[i], f) && is_nan_bits(ours, f));
    else bad += ours != gpu[i];
  }
  return bad;
}

int main() {
  if (cuda::device_count() == 0) {
    std::puts("SKIP: no CUDA device visible");
    return 77;
  }
  std::printf("device: %s\n", cuda::device_name().c_str());
  std::vector<std::uint32_t> p;
  for (std::uint32_t hi = 0; hi < 65536; ++hi)
    for (std::uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) p.push_back((hi << 16) | lo);
  long long bad = compare(p);
  std::printf("tie/boundary classes: %zu patterns, %lld mismatches\n", p.size(), bad);
  const std::uint64_t seed = lpdiag_test::seed("test_bf16_vs_cuda#35", 1277168u);
  std::mt19937_64 rng(seed);
  p.resize(10'000'000);
  long long rbad = 0;
  for (int c = 0; c < 10; ++c) {
    for (auto& u : p) u = static_cast<std::uint32_t>(rng());
    rbad += compare(p);
  }
  std::printf("random: 1e8 patterns (seed %llu), %lld mismatches\n", static_cast<unsigned long long>(seed), rbad);
  return bad + rbad == 0 ? 0 : 1;
}
