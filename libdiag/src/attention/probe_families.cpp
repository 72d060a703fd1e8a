#include "lpdiag/attention/probe_families.hpp"

#include <cmath>
#include <random>

#include "lpdiag/error.hpp"
#include "lpdiag/numerics/convert.hpp"

namespace lpdiag {

const std::vector<std::string>& probe_family_names() {
  static const std::vector<std::string> names = {"iid",          "sinks",     "dup-keys", "skewed-v",
                                                 "large-logits", "long-rows", "zero-max", "strong-sinks"};
  return names;
}

ProbeCase make_probe_case(const std::string& family, bool causal, std::uint64_t seed, std::int64_t head_dim) {
  if (head_dim < 2) throw InvalidArgument("probe case: head dim must be >= 2, got " + std::to_string(head_dim));
  ProbeCase pc;
  pc.family = family;
  pc.causal = causal;
  const bool strong = family == "strong-sinks";
  pc.B = strong ? 2 : 1;
  pc.H = strong ? 8 : 4;
  pc.N = family == "long-rows" ? 2048 : strong ? 512 : 256;
  pc.d = head_dim;
  std::mt19937_64 rng(seed ^ std::hash<std::string>{}(family) ^ (causal ? 0x9E37u : 0u));
  std::normal_distribution<float> g;
  std::uniform_real_distribution<float> u(0.5f, 2.0f);
  const auto n = static_cast<std::size_t>(pc.B * pc.H * pc.N * pc.d);
  for (auto* t : {&pc.q, &pc.k, &pc.v, &pc.dout}) {
    t->resize(n);
    for (float& x : *t) x = g(rng);
  }
  const std::int64_t N = pc.N, d = pc.d;
  const float root_d = std::sqrt(static_cast<float>(d));
  auto each_head = [&](auto&& fn) {
    for (std::int64_t h = 0; h < pc.B * pc.H; ++h)
      fn(pc.q.data() + h * N * d, pc.k.data() + h * N * d, pc.v.data() + h * N * d, pc.dout.data() + h * N * d);
  };
  // The paper's trigger: keys that tie for every row's max, others far below, one-signed V.
  auto one_signed = [&](float* v, float* dout) {
    for (std::int64_t x = 0; x < N * d; ++x) {
      v[x] = u(rng);
      dout[x] = std::fabs(dout[x]);
    }
  };
  if (family == "iid") {
    pc.description = "i.i.d. standard normal q, k, v, dO";
  } else if (family == "sinks") {
    pc.description = "attention sink: key 0 scores 6 above the rest for every query";
    each_head([&](float* q, float* k, float*, float*) {
      for (std::int64_t i = 0; i < N; ++i) q[i * d] = 0.0f, k[i * d] = 0.0f;
      for (std::int64_t i = 0; i < N; ++i) q[i * d] = std::sqrt(6.0f * root_d);
      k[0] = std::sqrt(6.0f * root_d);
    });
  } else if (family == "dup-keys") {
    pc.description = "duplicated keys: keys 0-3 identical and 8 above the rest (repeated maxima), one-signed V and dO";
    each_head([&](float* q, float* k, float* v, float* dout) {
      const float a = std::sqrt(8.0f * root_d);
      for (std::int64_t i = 0; i < N; ++i)
        for (std::int64_t c = 0; c < d; ++c) {
          q[i * d + c] = c == 0 ? a : 0.05f * q[i * d + c];
          k[i * d + c] = c == 0 ? 0.0f : 0.05f * k[i * d + c];
        }
      for (std::int64_t r = 1; r < 4; ++r)
        for (std::int64_t c = 0; c < d; ++c) k[r * d + c] = k[c];
      k[0] = k[d] = k[2 * d] = k[3 * d] = a;
      one_signed(v, dout);
    });
  } else if (family == "skewed-v") {
    pc.description = "i.i.d. q, k with sign-skewed V (every column positive) and dO";
    each_head([&](float*, float*, float* v, float* dout) { one_signed(v, dout); });
  } else if (family == "large-logits") {
    pc.description = "q, k scaled so logits reach ~100";
    for (float& x : pc.q) x *= 3.5f;
    for (float& x : pc.k) x *= 3.5f;
  } else if (family == "long-rows") {
    pc.description = "N = 2048 keys per row, i.i.d.";
  } else if (family == "zero-max") {
    pc.description = "q = 0: every score is exactly 0, so every row's max (0) is repeated";
    for (float& x : pc.q) x = 0.0f;
    each_head([&](float*, float*, float* v, float* dout) { one_signed(v, dout); });
  } else if (strong) {
    pc.description =
        "strong sinks: 2-4 identical keys score 12-20 above the rest for every query (logits of the rest ~N(0,1)); "
        "half of V's columns negative in [-2,-1), the rest N(0,1); dO = |N(0,1)|";
    std::uniform_int_distribution<int> n_sinks(2, 4);
    std::uniform_real_distribution<float> gap(12.0f, 20.0f), neg(-2.0f, -1.0f);
    each_head([&](float* q, float* k, float* v, float* dout) {
      const int ns = n_sinks(rng);
      const float a = std::sqrt(gap(rng) * root_d);  // sink logit - rest: a^2 / sqrt(d), before the N(0,1) part
      for (std::int64_t i = 0; i < N; ++i) q[i * d] = a;
      for (std::int64_t j = 0; j < N; ++j) k[j * d] = j < ns ? a : 0.0f;
      for (std::int64_t j = 1; j < ns; ++j)
        for (std::int64_t c = 1; c < d; ++c) k[j * d + c] = k[c];
      for (std::int64_t j = 0; j < N; ++j)
        for (std::int64_t c = d / 2; c < d; ++c) v[j * d + c] = neg(rng);
      for (std::int64_t x = 0; x < N * d; ++x) dout[x] = std::fabs(dout[x]);
    });
  } else {
    std::string names;
    for (const auto& f : probe_family_names()) names += (names.empty() ? "" : ", ") + f;
    throw InvalidArgument("unknown probe family '" + family + "'; families are: " + names);
  }
  for (auto* t : {&pc.q, &pc.k, &pc.v, &pc.dout})
    for (float& x : *t) x = round_bf16(x);
  return pc;
}

}  // namespace lpdiag
