// e^x and ln x of fp32 values, rounded to fp32 from a double evaluation, one definition for the
// CPU emulation's fp32 policy and the CUDA fp32 kernels: every step is an explicit IEEE double
// operation rounded to nearest (no FMA contraction, no library call), so host and device return
// the same bits for every input. Accuracy: the double result is within ~4e-16 of e^x (ln x), so
// the fp32 result is the correctly rounded one except when e^x lies that close to the midpoint
// of two floats (about one input in 10^8); glibc's expf / logf and CUDA's expf / logf differ
// from each other, and from correct rounding, far more often.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LPDIAG_HD_FN __host__ __device__ __forceinline__
#else
#define LPDIAG_HD_FN inline
#endif

namespace lpdiag {
namespace fp32_math {

LPDIAG_HD_FN double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
LPDIAG_HD_FN double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
LPDIAG_HD_FN double div(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
LPDIAG_HD_FN float to_float(double x) {
#if defined(__CUDA_ARCH__)
  return __double2float_rn(x);
#else
  return static_cast<float>(x);
#endif
}
// x * 2^k for an integer k in [-1022, 1023] (exact: the result is a normal double here).
LPDIAG_HD_FN double times_pow2(double x, int k) {
  const std::uint64_t bits = static_cast<std::uint64_t>(k + 1023) << 52;
  double p;
  memcpy(&p, &bits, 8);
  return mul(x, p);
}
LPDIAG_HD_FN float float_of_bits(std::uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
LPDIAG_HD_FN float inf() { return float_of_bits(0x7F800000u); }

// ln 2 in two parts; the high part has 21 trailing zero bits, so k * kLn2Hi is exact for |k| < 2^21.
constexpr double kLn2Hi = 6.93147180369123816490e-01;
constexpr double kLn2Lo = 1.90821492927058770002e-10;
constexpr double kInvLn2 = 1.44269504088896338700e+00;

}  // namespace fp32_math

// e^x rounded to fp32.
LPDIAG_HD_FN float exp_fp32(float x) {
  using namespace fp32_math;
  if (x != x) return x;
  if (x > 89.f) return inf();  // e^88.73 > FLT_MAX already
  if (x < -104.f) return 0.f;                                    // below half the smallest subnormal
  const double xd = x;
  // k = nearest integer to x / ln 2 (|k| <= 151), r = x - k ln 2 in [-0.35, 0.35].
  const double t = mul(xd, kInvLn2);
  const int k = static_cast<int>(t >= 0 ? t + 0.5 : t - 0.5);
  const double kd = k;
  const double r = add(add(xd, -mul(kd, kLn2Hi)), -mul(kd, kLn2Lo));
  // e^r by Taylor's series to r^14 / 14! (< 5e-18 left), Horner from the highest term.
  double s = 1.0 / 87178291200.0;  // 1/14!
  const double inv[14] = {1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
                          1.0 / 40320.0,      1.0 / 5040.0,      1.0 / 720.0,       1.0 / 120.0,     1.0 / 24.0,
                          1.0 / 6.0,          0.5,               1.0,               1.0};
  for (int n = 0; n < 14; ++n) s = add(mul(s, r), inv[n]);
  return to_float(times_pow2(s, k));
}

// ln x rounded to fp32 (x <= 0: -inf at 0, NaN below; +inf stays +inf).
LPDIAG_HD_FN float log_fp32(float x) {
  using namespace fp32_math;
  if (x != x) return x;
  if (x < 0.f) return float_of_bits(0x7FC00000u);
  if (x == 0.f) return -inf();
  if (x == inf()) return x;
  // x = f 2^e with f in [sqrt(1/2), sqrt(2)) (exact: read from the bits; subnormals scaled first).
  double xd = x;
  int e = 0;
  if (x < 1.17549435e-38f) xd = mul(xd, 18446744073709551616.0), e = -64;  // 2^64
  std::uint64_t bits;
  memcpy(&bits, &xd, 8);
  e += static_cast<int>((bits >> 52) & 0x7FF) - 1023;
  bits = (bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull;  // f in [1, 2)
  double f;
  memcpy(&f, &bits, 8);
  if (f >= 1.4142135623730951) f = mul(f, 0.5), e += 1;
  // ln f = 2 atanh(s), s = (f - 1) / (f + 1), |s| <= 0.1716: the odd series to s^23 (< 1e-19 left).
  const double s = div(add(f, -1.0), add(f, 1.0)), s2 = mul(s, s);
  double p = 2.0 / 23.0;
  const double coef[11] = {2.0 / 21.0, 2.0 / 19.0, 2.0 / 17.0, 2.0 / 15.0, 2.0 / 13.0, 2.0 / 11.0,
                           2.0 / 9.0,  2.0 / 7.0,  2.0 / 5.0,  2.0 / 3.0,  2.0};
  for (int n = 0; n < 11; ++n) p = add(mul(p, s2), coef[n]);
  const double ed = e;
  return to_float(add(mul(ed, kLn2Hi), add(mul(ed, kLn2Lo), mul(p, s))));
}

}  // namespace lpdiag
