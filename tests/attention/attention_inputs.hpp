// Input builders for attention tests: i.i.d. Gaussian and the adversarial case of the paper
// (a duplicated key that makes every row's max repeat, all other P-bar entries negligible, and
// sign-skewed V columns). All values are exact in bf16.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "lpdiag/attention/engine.hpp"
#include "lpdiag/numerics/convert.hpp"

namespace lpdiag::testing {

struct Tensors {
  std::int64_t B = 1, H = 1, N = 0, d = 0;
  std::vector<float> q, k, v, dout;
  AttentionInputs inputs() const { return {q.data(), k.data(), v.data(), dout.data(), B, H, N, d}; }
};

inline Tensors gaussian(std::int64_t B, std::int64_t H, std::int64_t N, std::int64_t d, std::uint64_t seed) {
  Tensors t{B, H, N, d, {}, {}, {}, {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g;
  for (auto* x : {&t.q, &t.k, &t.v, &t.dout}) {
    x->resize(static_cast<std::size_t>(B * H * N * d));
    for (float& y : *x) y = round_bf16(g(rng));
  }
  return t;
}

// Every row's max is attained by keys 0 and 1 (identical), every other score is at least
// `gap` below it, and V column c has the sign sign_of_column(c) (+ for even c, - for odd c).
inline Tensors repeated_max(std::int64_t H, std::int64_t N, std::int64_t d, float gap, std::uint64_t seed) {
  if (N < 2) throw std::invalid_argument("repeated_max needs N >= 2 (keys 0 and 1 carry the max)");
  Tensors t{1, H, N, d, {}, {}, {}, {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g;
  std::uniform_real_distribution<float> u(1.0f, 4.0f);
  const auto n = static_cast<std::size_t>(H * N * d);
  t.q.resize(n), t.k.resize(n), t.v.resize(n), t.dout.resize(n);
  const float a = std::sqrt(gap * std::sqrt(static_cast<float>(d)));  // score of the max pair = gap
  for (std::int64_t h = 0; h < H; ++h) {
    float* q = t.q.data() + h * N * d;
    float* k = t.k.data() + h * N * d;
    float* v = t.v.data() + h * N * d;
    float* dout = t.dout.data() + h * N * d;
    for (std::int64_t i = 0; i < N; ++i) {
      for (std::int64_t c = 0; c < d; ++c) {
        q[i * d + c] = c == 0 ? round_bf16(a) : round_bf16(0.05f * g(rng));
        k[i * d + c] = c == 0 ? 0.0f : round_bf16(0.05f * g(rng));
        const float mag = round_bf16(u(rng));
        v[i * d + c] = c % 2 == 0 ? mag : -mag;
        dout[i * d + c] = c % 2 == 0 ? round_bf16(std::fabs(g(rng))) : -round_bf16(std::fabs(g(rng)));
      }
    }
    for (std::int64_t r : {0, 1})
      for (std::int64_t c = 0; c < d; ++c) k[r * d + c] = c == 0 ? round_bf16(a) : 0.0f;
  }
  return t;
}

}  // namespace lpdiag::testing
