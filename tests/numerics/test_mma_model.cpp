// The MMA model (numerics/mma_model.hpp) against tensor-core results recorded on the H200 by
// tests/cuda/mma_probe.cu (fixture: 256 mma.sync m16n8k16 and 32 wgmma m64n64k16 instructions,
// 163,840 results, from a seed the model was not fitted on): every result bit for bit. Then
// the rules one at a time on hand-made cases, and what the old one-at-a-time order would give.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../catch_compat.hpp"
#include "lpdiag/numerics/convert.hpp"
#include "lpdiag/numerics/mma_model.hpp"

using namespace lpdiag;

namespace {

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

float mma16(float c, std::vector<float> a, std::vector<float> b) {
  a.resize(16, 0.f), b.resize(16, 0.f);
  return mma_accumulate(c, a.data(), b.data(), 16);
}

}  // namespace

TEST_CASE("mma model: every recorded H200 result bit for bit", "[numerics][mma]") {
  const std::string path = std::string(LPDIAG_FIXTURES) + "/mma/h200-mma-seed2.bin";
  FILE* f = std::fopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  char magic[8];
  std::uint64_t seed = 0;
  std::uint32_t n = 0;
  REQUIRE(std::fread(magic, 1, 8, f) == 8);
  REQUIRE(std::string(magic, 8) == "LPMMA001");
  REQUIRE(std::fread(&seed, 8, 1, f) == 1);
  REQUIRE(std::fread(&n, 4, 1, f) == 1);
  long long total = 0, bad = 0, kinds[2] = {0, 0};
  for (std::uint32_t r = 0; r < n; ++r) {
    std::uint32_t h[4];
    REQUIRE(std::fread(h, 4, 4, f) == 4);
    const std::uint32_t kind = h[0], M = h[2], N = h[3];
    std::vector<std::uint16_t> a(M * 16), b(16 * N);
    std::vector<float> c(M * N), d(M * N);
    REQUIRE(std::fread(a.data(), 2, a.size(), f) == a.size());
    REQUIRE(std::fread(b.data(), 2, b.size(), f) == b.size());
    REQUIRE(std::fread(c.data(), 4, c.size(), f) == c.size());
    REQUIRE(std::fread(d.data(), 4, d.size(), f) == d.size());
    kinds[kind & 1] += 1;
    float p[16], q[16];
    for (std::uint32_t i = 0; i < M; ++i)
      for (std::uint32_t j = 0; j < N; ++j) {
        for (int k = 0; k < 16; ++k) p[k] = bf16_to_float(a[i * 16 + k]), q[k] = bf16_to_float(b[k * N + j]);
        const float want = d[i * N + j], got = mma_accumulate(c[i * N + j], p, q, 16);
        if (bits(got) != bits(want) && bad++ < 5)
          std::printf("record %u (%s, category %u) D[%u][%u]: model %a, device %a\n", r, kind ? "wgmma" : "mma.sync", h[1], i, j,
                      got, want);
        ++total;
      }
  }
  std::fclose(f);
  std::printf("recorded seed %llu: %lld mma.sync + %lld wgmma instructions, %lld results, %lld differ\n",
              static_cast<unsigned long long>(seed), kinds[0], kinds[1], total, bad);
  CHECK(kinds[0] > 0);
  CHECK(kinds[1] > 0);
  CHECK(bad == 0);
}

TEST_CASE("mma model: the rules one at a time", "[numerics][mma]") {
  // An addend below the frame (2^-26 under an accumulator of 1) is dropped entirely, where an
  // fp32 add would round 1 + 2^-26 to 1 too; at 2^-25 it survives as one frame bit, but the
  // normalisation toward zero truncates 1 + 2^-25 back to 1 (an fp32 add also gives 1).
  CHECK(mma16(1.0f, {0x1p-26f}, {1.0f}) == 1.0f);
  // Sixteen addends of 2^-26 each: one at a time in fp32 each is lost (1 + 2^-26 rounds to 1);
  // aligned and truncated they are lost too (below the 26-bit frame).
  CHECK(mma16(1.0f, std::vector<float>(16, 0x1p-26f), std::vector<float>(16, 1.0f)) == 1.0f);
  // Sixteen of 2^-25 keep one frame bit each: 16 2^-25 = 2^-21 is added exactly.
  CHECK(mma16(1.0f, std::vector<float>(16, 0x1p-25f), std::vector<float>(16, 1.0f)) == 1.0f + 0x1p-21f);
  // Aligned terms are truncated toward zero in magnitude: a negative addend below the frame is
  // dropped (truncation toward -inf would take one frame unit, giving 1 - 2^-24 after the final
  // rounding).
  CHECK(mma16(1.0f, {-0x1.cp-26f}, {1.0f}) == 1.0f);
  // The normalised sum is rounded toward zero: 1 + 3 2^-25 becomes 1, where nearest gives 1 + 2^-23.
  CHECK(mma16(1.0f, {0x1.8p-24f}, {1.0f}) == 1.0f);
  // ... and below 1 as well: 1 - 2^-25 becomes 1 - 2^-24 (nearest-even would give 1).
  CHECK(mma16(1.0f, {-0x1p-25f}, {1.0f}) == 1.0f - 0x1p-24f);
  // Products are exact and the frame follows the largest exponent among them.
  CHECK(mma16(0.0f, {3.0f, 0x1p-30f}, {3.0f, 1.0f}) == 9.0f);
  // Every term zero: the accumulator is returned as is (-0 stays -0).
  CHECK(bits(mma16(-0.0f, {}, {})) == bits(-0.0f));
  // Inf and NaN follow IEEE.
  CHECK(std::isinf(mma16(1.0f, {0x1p127f}, {0x1p10f})));
}
