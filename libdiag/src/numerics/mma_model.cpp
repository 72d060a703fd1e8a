#include "lpdiag/numerics/mma_model.hpp"

#include <cmath>
#include <cstring>

namespace lpdiag {

const MmaModel& hopper_mma_model() {
  static const MmaModel m{};
  return m;
}

namespace {

struct Term {
  std::int64_t mant = 0;  // signed integer significand: value = mant 2^(exp - 23)
  int exp = 0;            // unbiased exponent of a normal float (subnormals: -126, no implicit bit)
};

// A finite float as a signed 24-bit integer significand and exponent; zero gives mant 0.
inline Term split(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  const int be = static_cast<int>((u >> 23) & 0xFFu);
  std::int64_t m = u & 0x7FFFFFu;
  Term t;
  if (be == 0) {
    t.exp = -126;
  } else {
    m |= 0x800000;
    t.exp = be - 127;
  }
  t.mant = (u >> 31) ? -m : m;
  return t;
}

// The term's multiple of 2^lsb: exact, or with the bits below 2^lsb truncated.
inline std::int64_t align(const Term& t, int lsb, bool toward_zero) {
  const int shift = t.exp - 23 - lsb;
  if (shift >= 0) return t.mant * (std::int64_t{1} << shift);
  if (shift <= -40) return toward_zero || t.mant >= 0 ? 0 : -1;
  if (toward_zero) {
    const std::int64_t mag = (t.mant < 0 ? -t.mant : t.mant) >> -shift;
    return t.mant < 0 ? -mag : mag;
  }
  return t.mant >> -shift;  // arithmetic shift: floor
}

// v 2^lsb rounded to fp32 (toward zero or nearest-even).
inline float to_float(std::int64_t v, int lsb, bool nearest) {
  if (v == 0) return 0.0f;
  const bool neg = v < 0;
  std::uint64_t mag = neg ? static_cast<std::uint64_t>(-v) : static_cast<std::uint64_t>(v);
  const int bits = 64 - __builtin_clzll(mag);
  if (bits > 24) {
    const int drop = bits - 24;
    const std::uint64_t rest = mag & ((std::uint64_t{1} << drop) - 1);
    mag >>= drop;
    lsb += drop;
    if (nearest) {
      const std::uint64_t half = std::uint64_t{1} << (drop - 1);
      if (rest > half || (rest == half && (mag & 1))) ++mag;  // a carry to 2^24 is still exact
    }
  }
  const float r = std::ldexp(static_cast<float>(mag), lsb);
  return neg ? -r : r;
}

}  // namespace

float mma_accumulate(float c, const float* a, const float* b, int n, const MmaModel& m) {
  float acc = c;
  float prod[64];
  for (int k0 = 0; k0 < n; k0 += m.group) {
    const int k1 = k0 + m.group < n ? k0 + m.group : n, g = k1 - k0;
    bool finite = std::isfinite(acc);
    for (int k = 0; k < g; ++k) {
      prod[k] = a[k0 + k] * b[k0 + k];  // exact: at most 16 significand bits (outside under/overflow)
      finite = finite && std::isfinite(prod[k]);
    }
    if (!finite) {
      double plain = acc;
      for (int k = 0; k < g; ++k) plain += static_cast<double>(a[k0 + k]) * b[k0 + k];
      acc = static_cast<float>(plain);
      continue;
    }
    Term t[65];
    t[0] = split(acc);
    int emax = -1000;
    if (t[0].mant) emax = t[0].exp;
    for (int k = 0; k < g; ++k) {
      t[k + 1] = split(prod[k]);
      if (!t[k + 1].mant) continue;
      const int e = m.product_exp_from_inputs ? split(a[k0 + k]).exp + split(b[k0 + k]).exp : t[k + 1].exp;
      if (e > emax) emax = e;
    }
    if (emax == -1000) continue;  // every term zero: acc unchanged
    const int lsb = emax - 23 - (m.frame_bits - 24);
    std::int64_t sum = 0;
    for (int k = 0; k <= g; ++k) sum += align(t[k], lsb, m.truncate_toward_zero);
    acc = to_float(sum, lsb, m.round_nearest);
  }
  return acc;
}

}  // namespace lpdiag
