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
  // mag < 2^24 (or = 2^24 after a carry): value = mag 2^lsb. Normal results are built bit by bit.
  const int top = 63 - __builtin_clzll(mag);  // 23, or 24 after a carry, or less for small sums
  const int e = top + lsb;                    // unbiased exponent of the result
  if (e >= -126 && e <= 127) {
    const std::uint32_t word = (neg ? 0x80000000u : 0u) | static_cast<std::uint32_t>(e + 127) << 23 |
                               (static_cast<std::uint32_t>(mag << (23 - top)) & 0x7FFFFFu);
    float r;
    std::memcpy(&r, &word, 4);
    return r;
  }
  const float r = std::ldexp(static_cast<float>(mag), lsb);
  return neg ? -r : r;
}

}  // namespace

float mma_accumulate(float c, const float* a, const float* b, int n, const MmaModel& m) {
  float acc = c;
  for (int k0 = 0; k0 < n; k0 += m.group) {
    const int k1 = k0 + m.group < n ? k0 + m.group : n, g = k1 - k0;
    // The products as exact integers: a bf16 value held in a float has at most 8 significant
    // bits, so |a b| = (ma mb) 2^(ea + eb - 46) with ma, mb the 24-bit float significands
    // (whose low 16 bits are zero): the product's integer is (ma >> 16)(mb >> 16) 2^32.
    std::int64_t pm[64];
    int pe[64];  // exponent of the product's integer's unit (value = pm 2^pe)
    bool finite = std::isfinite(acc), exact_inputs = true;
    const Term tc = split(acc);
    int emax = tc.mant ? tc.exp : -100000;
    for (int k = 0; k < g; ++k) {
      const Term ta = split(a[k0 + k]), tb = split(b[k0 + k]);
      finite = finite && std::isfinite(a[k0 + k]) && std::isfinite(b[k0 + k]);
      exact_inputs = exact_inputs && (ta.mant & 0xFFFF) == 0 && (tb.mant & 0xFFFF) == 0;
      pm[k] = (ta.mant / 65536) * (tb.mant / 65536);  // exact when the inputs are bf16
      pe[k] = ta.exp + tb.exp - 14;                   // value = pm 2^(ea - 7 + eb - 7)
      if (pm[k]) {
        const int e = m.product_exp_from_inputs ? ta.exp + tb.exp : 63 - __builtin_clzll(static_cast<std::uint64_t>(pm[k] < 0 ? -pm[k] : pm[k])) + pe[k];
        if (e > emax) emax = e;
      }
    }
    if (!finite || !exact_inputs) {  // IEEE for non-finite values; inputs that are not bf16: exact products in double
      double plain = acc;
      for (int k = 0; k < g; ++k) plain += static_cast<double>(a[k0 + k]) * b[k0 + k];
      acc = static_cast<float>(plain);
      continue;
    }
    if (emax == -100000) continue;  // every term zero: acc unchanged
    const int lsb = emax - m.frame_bits + 1;
    std::int64_t sum = align(tc, lsb, m.truncate_toward_zero);
    for (int k = 0; k < g; ++k) {
      if (!pm[k]) continue;
      const int shift = pe[k] - lsb;
      std::int64_t v;
      if (shift >= 0) {
        v = pm[k] * (std::int64_t{1} << shift);
      } else if (shift <= -40) {
        v = m.truncate_toward_zero || pm[k] >= 0 ? 0 : -1;
      } else if (m.truncate_toward_zero) {
        const std::int64_t mag = (pm[k] < 0 ? -pm[k] : pm[k]) >> -shift;
        v = pm[k] < 0 ? -mag : mag;
      } else {
        v = pm[k] >> -shift;
      }
      sum += v;
    }
    acc = to_float(sum, lsb, m.round_nearest);
  }
  return acc;
}

}  // namespace lpdiag
