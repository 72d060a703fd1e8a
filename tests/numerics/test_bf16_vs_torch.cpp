// fp32 -> bf16 nearest-even against an independent implementation: LibTorch's own conversion.
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "catch_compat.hpp"
#include "lpdiag/numerics/convert.hpp"
#include "test_seed.hpp"

using namespace lpdiag;

namespace {

// Compares our fast and generic conversions with torch's on a buffer of float bit patterns.
// NaN payloads are not part of either contract: NaN must map to NaN.
std::int64_t count_mismatches(const std::vector<std::uint32_t>& patterns, bool check_generic) {
  const auto n = static_cast<std::int64_t>(patterns.size());
  torch::Tensor src = torch::from_blob(const_cast<std::uint32_t*>(patterns.data()), {n}, torch::kInt32)
                          .view(torch::kFloat32);
  torch::Tensor bf = src.to(torch::kBFloat16).view(torch::kInt16).contiguous();
  const auto* ref = reinterpret_cast<const std::uint16_t*>(bf.data_ptr<std::int16_t>());
  const FloatFormat& f = format(FormatId::bf16);
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    float x;
    std::memcpy(&x, &patterns[i], 4);
    const std::uint16_t ours = bf16_bits_rne(x);
    if (std::isnan(x)) {
      bad += !(is_nan_bits(ref[i], f) && is_nan_bits(ours, f));
      continue;
    }
    bad += ours != ref[i];
    if (check_generic) bad += encode(static_cast<double>(x), f) != ref[i];
  }
  return bad;
}

}  // namespace

TEST_CASE("fp32 -> bf16 agrees with LibTorch on every tie and boundary class", "[numerics][torch]") {
  std::vector<std::uint32_t> p;
  for (std::uint32_t hi = 0; hi < 65536; ++hi)
    for (std::uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) p.push_back((hi << 16) | lo);
  CHECK(count_mismatches(p, true) == 0);
}

TEST_CASE("fp32 -> bf16 agrees with LibTorch on 1e8 random bit patterns", "[numerics][torch]") {
  // Fresh patterns every run; the seed is printed so a failure can be replayed.
  const std::uint64_t seed = lpdiag_test::seed("test_bf16_vs_torch#17", 1134626u);
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const std::size_t chunk = 10'000'000;
  std::vector<std::uint32_t> p(chunk);
  std::int64_t bad = 0;
  for (int c = 0; c < 10; ++c) {
    for (auto& u : p) u = static_cast<std::uint32_t>(rng());
    bad += count_mismatches(p, c == 0);  // the slow generic path on the first 1e7
  }
  CHECK(bad == 0);
}
