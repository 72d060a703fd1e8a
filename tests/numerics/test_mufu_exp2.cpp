// The MUFU ex2 model (numerics/mufu_exp2.hpp) against ex2.approx.ftz.f32 recorded on the H200
// (tests/cuda/mma_probe.cu --ex2-table, 65,536 of its seeded samples: |x| with exponent uniform
// in [-30, 7] and a random significand, x = -|x|): every result bit for bit. The arguments are
// regenerated here from the recorded seed (mt19937_64 is fully specified by the standard).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../catch_compat.hpp"
#include "lpdiag/numerics/mufu_exp2.hpp"

TEST_CASE("mufu ex2: every recorded H200 result bit for bit", "[numerics][mufu]") {
  const std::string path = std::string(LPDIAG_FIXTURES) + "/mufu/h200-ex2-seed12345.bin";
  FILE* f = std::fopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  std::vector<std::uint32_t> want(65536);
  REQUIRE(std::fread(want.data(), 4, want.size(), f) == want.size());
  std::fclose(f);
  std::mt19937_64 rng(12345);
  long long bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const std::uint64_t r = rng();
    const int e = -30 + static_cast<int>((r >> 23) % 38);
    const std::uint32_t u = 0x80000000u | static_cast<std::uint32_t>(e + 127) << 23 | static_cast<std::uint32_t>(r & 0x7FFFFF);
    float x;
    std::memcpy(&x, &u, 4);
    const float y = lpdiag::mufu_exp2(x);
    std::uint32_t yb;
    std::memcpy(&yb, &y, 4);
    if (yb != want[i] && bad++ < 5) std::printf("x = %a: model %a, device %a\n", x, y, [&] { float w; std::memcpy(&w, &want[i], 4); return w; }());
  }
  std::printf("%zu recorded samples, %lld differ\n", want.size(), bad);
  CHECK(bad == 0);
  // Exact where the softmax needs it, and flushed below the normal range.
  CHECK(lpdiag::mufu_exp2(0.0f) == 1.0f);
  CHECK(lpdiag::mufu_exp2(-INFINITY) == 0.0f);
  CHECK(lpdiag::mufu_exp2(-1.0f) == 0.5f);
  CHECK(lpdiag::mufu_exp2(-126.5f) == 0.0f);
  // The MUFU is not correctly rounded: at least one of these differs from nearest 2^x.
  int differs = 0;
  for (float x = -1.0f; x < -0.5f; x += 0x1p-10f) differs += lpdiag::mufu_exp2(x) != static_cast<float>(std::exp2(static_cast<double>(x)));
  CHECK(differs > 0);
}
