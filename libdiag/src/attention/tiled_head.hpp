// The tiled FlashAttention-2 algorithm for one (batch, head), written once and specialised at
// compile time for each numerics mode. Every rounding is an explicit call; the order of
// operations is the one docs/reference/attention-numerics.md declares. Private to libdiag.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "lpdiag/attention/attention_config.hpp"
#include "lpdiag/numerics/convert.hpp"
#include "lpdiag/numerics/exp_log_fp32.hpp"
#include "lpdiag/numerics/mma_model.hpp"
#include "lpdiag/numerics/mufu_exp2.hpp"
#include "lpdiag/numerics/stochastic_bf16.hpp"
#include "lpdiag/trace/head_counters.hpp"

namespace lpdiag::detail {

// fa2: lpdiag's CUDA kernels (MMA accumulation, MUFU exp input, the lane order of the row sum);
// fa2_seq: the same policy with every product added one at a time in fp32; seed_mma: the seed
// policy's roundings with its matrix products on the tensor cores (MMA model), its tile row sums
// in the kernels' lane order.
enum class Mode { fa2, fa2_seq, seed, seed_mma, fp32, fp8, hp };

template <Mode M>
constexpr bool is_fa2 = M == Mode::fa2 || M == Mode::fa2_seq;
template <Mode M>
constexpr bool is_seed = M == Mode::seed || M == Mode::seed_mma;
// Policies whose matrix products are tensor-core k16 steps (numerics/mma_model.hpp).
template <Mode M>
constexpr bool mma_products = M == Mode::fa2 || M == Mode::seed_mma;

struct HeadShape {
  std::int64_t N = 0, d = 0;
  int tile_q = 64, tile_k = 64;
  bool causal = false;
  double scale = 0.0;
  FixConfig fix;             // ignored by hp: hp always uses the plain running max
  std::int64_t head = 0;     // b H + h: the element index of stochastic rounding
  const FloatFormat* fp8 = nullptr;
};

template <Mode M>
using Real = std::conditional_t<M == Mode::hp, double, float>;

inline float bf(float x) { return round_bf16(x); }

constexpr float kBf16Max = 3.38953139e38f;         // the largest finite bf16
constexpr float kSeedRowSumFloor = 1.00044417e-10f;  // bf16(1e-10): the paper's EPSILON

// S from the fp32 (hp: fp64) dot-product sum.
template <Mode M>
inline Real<M> score(Real<M> sum, double scale) {
  if constexpr (M == Mode::hp) return scale * sum;
  else if constexpr (is_seed<M>) return bf(bf(sum) * static_cast<float>(scale));
  else return static_cast<float>(scale) * sum;
}

// exp(a - b) with the policy's rounding of the difference and of the result.
// e^x as the kernels take it: 2^(x log2 e) with x log2 e rounded to fp32, then the MUFU's ex2
// (ex2.approx.ftz, emulated bit for bit: numerics/mufu_exp2.hpp).
inline float exp_mufu(float x) { return mufu_exp2(x * 1.4426950408889634f); }

template <Mode M>
inline Real<M> exp_diff(Real<M> a, Real<M> b) {
  if constexpr (is_seed<M>) return bf(std::exp(bf(a - b)));
  else if constexpr (M == Mode::fa2) return exp_mufu(a - b);
  else if constexpr (M == Mode::fp32) return exp_fp32(a - b);  // correctly rounded, as the CUDA fp32 kernels
  else return std::exp(a - b);
}

// The P value fed to a matrix product (P-bar V forward, P^T dO backward).
template <Mode M>
inline Real<M> mma_p(Real<M> p, const FloatFormat* fp8, bool forward) {
  if constexpr (is_fa2<M>) return bf(p);
  else if constexpr (M == Mode::fp8) return forward ? static_cast<float>(round_to(p, *fp8)) : bf(p);
  else return p;  // seed: already bf16; fp32 and hp: unrounded
}

template <Mode M>
inline Real<M> mma_ds(Real<M> ds) {
  if constexpr (is_fa2<M> || M == Mode::fp8) return bf(ds);
  else return ds;
}

// Final rounding of an output element.
template <Mode M>
inline Real<M> out_round(Real<M> x) {
  if constexpr (is_fa2<M> || M == Mode::fp8 || is_seed<M>) return bf(x);
  else return x;
}

// A tile's row sum of P-bar added one at a time, in key order (the CPU's seed).
inline float sequential_sum(const float* p, std::int64_t n) {
  float ls = 0.f;
  for (std::int64_t j = 0; j < n; ++j) ls += p[j];
  return ls;
}

// A tile's P-bar into the four lane sums of a row's quad, as the mma.sync kernels add them: lane
// q adds keys 8 t + 2 q and 8 t + 2 q + 1 of every n8 tile t in order.
inline void lane_order_add(float (&lq)[4], const float* p, std::int64_t n) {
  for (std::int64_t n8 = 0; n8 < n; n8 += 8)
    for (int q4 = 0; q4 < 4; ++q4)
      for (std::int64_t e = 0; e < 2; ++e) {
        const std::int64_t j = n8 + 2 * q4 + e;
        if (j < n) lq[q4] += p[j];
      }
}

// The tile's row sum as the kernels form it: the lane sums from zero, then (0 + 1) + (2 + 3).
inline float lane_order_sum(const float* p, std::int64_t n) {
  float lq[4] = {0.f, 0.f, 0.f, 0.f};
  lane_order_add(lq, p, n);
  return (lq[0] + lq[1]) + (lq[2] + lq[3]);
}

// The row's S over key tile [j0, j1): s[j - j0]. kt is K transposed (d x N), so the inner loop
// runs over keys and each element sums over the feature index in order.
template <Mode M>
inline void scores(const HeadShape& hs, const float* qi, const float* kt, std::int64_t j0, std::int64_t j1,
                   Real<M>* s) {
  using T = Real<M>;
  const std::int64_t n = j1 - j0;
  if constexpr (mma_products<M>) {
    // Tensor-core k16 steps over the feature index, from a zero accumulator.
    float kc[16];
    for (std::int64_t j = 0; j < n; ++j) {
      float acc = 0.f;
      for (std::int64_t c0 = 0; c0 < hs.d; c0 += 16) {
        const int w = static_cast<int>(std::min<std::int64_t>(16, hs.d - c0));
        for (int c = 0; c < w; ++c) kc[c] = kt[(c0 + c) * hs.N + j0 + j];
        acc = mma_accumulate(acc, qi + c0, kc, w);
      }
      s[j] = score<M>(acc, hs.scale);
    }
    return;
  }
  for (std::int64_t j = 0; j < n; ++j) s[j] = T(0);
  for (std::int64_t c = 0; c < hs.d; ++c) {
    const T qc = static_cast<T>(qi[c]);
    const float* kr = kt + c * hs.N + j0;
    for (std::int64_t j = 0; j < n; ++j) s[j] += qc * static_cast<T>(kr[j]);
  }
  for (std::int64_t j = 0; j < n; ++j) s[j] = score<M>(s[j], hs.scale);
}

// Forward. o: N x d, lse: N. counters may be null (hp).
template <Mode M>
void forward_head(const HeadShape& hs, const float* q, const float* kt, const float* v, Real<M>* o, Real<M>* lse,
                  HeadCounters* cnt) {
  using T = Real<M>;
  const std::int64_t N = hs.N, d = hs.d, Bc = hs.tile_k;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const bool fixed = M != Mode::hp && hs.fix.shifts();
  const bool stochastic_o = M != Mode::hp && hs.fix.kind == FixConfig::Kind::sr;
  std::vector<T> s(static_cast<std::size_t>(Bc)), p(static_cast<std::size_t>(Bc)), acc(static_cast<std::size_t>(d)),
      part(static_cast<std::size_t>(d));
  std::vector<float> col(M == Mode::seed_mma ? static_cast<std::size_t>(Bc) : 0);
  for (std::int64_t i = 0; i < N; ++i) {
    const std::int64_t nk = hs.causal ? i + 1 : N;
    T m = neg_inf, l = T(0);
    std::fill(acc.begin(), acc.end(), T(0));
    T row_max = neg_inf;
    std::int64_t row_count = 0;
    bool engaged = false;
    float lpart[4] = {0.f, 0.f, 0.f, 0.f};  // fa2 only
    // seed, causal: the paper's code visits every key tile and masks the keys after the query
    // with -max(bf16), so a tile above the diagonal is all ties (which its fix then shifts).
    const std::int64_t n_visit = is_seed<M> && hs.causal ? N : nk;
    for (std::int64_t j0 = 0; j0 < n_visit; j0 += Bc) {
      const std::int64_t j1 = std::min(n_visit, j0 + Bc), n = j1 - j0;
      const std::int64_t n_real = std::max<std::int64_t>(0, std::min(n, nk - j0));  // unmasked keys
      scores<M>(hs, q + i * d, kt, j0, j0 + std::max<std::int64_t>(n_real, 1), s.data());
      for (std::int64_t j = n_real; j < n; ++j) s[j] = -kBf16Max;
      T tm = neg_inf;
      for (std::int64_t j = 0; j < n; ++j) tm = std::max(tm, s[j]);
      if (cnt && n_real > 0) {
        T rm = neg_inf;
        for (std::int64_t j = 0; j < n_real; ++j) rm = std::max(rm, s[j]);
        std::int64_t tc = 0;
        for (std::int64_t j = 0; j < n_real; ++j) tc += s[j] == rm;
        cnt->tile_repeated_max_rows += tc >= 2;
        if (rm > row_max) row_max = rm, row_count = tc;
        else if (rm == row_max) row_count += tc;
        cnt->logit_max = std::max(cnt->logit_max, static_cast<float>(rm));
      }
      T shift = tm;
      if (fixed) {
        std::int64_t near = 0;
        for (std::int64_t j = 0; j < n; ++j) {
          // seed: the paper's test, S >= bf16(max - tol), in bf16 arithmetic.
          if constexpr (is_seed<M>) near += s[j] >= bf(tm - static_cast<float>(hs.fix.tol));
          else near += (tm - s[j]) <= static_cast<T>(hs.fix.tol);
        }
        if (near >= 2) {
          if (hs.fix.kind == FixConfig::Kind::paper) {
            if (tm > 0) shift = static_cast<T>(hs.fix.beta) * tm;
            else if (tm < 0) shift = T(0);
          } else {
            shift = tm + static_cast<T>(hs.fix.offset);
          }
          if constexpr (is_seed<M>) shift = bf(shift);
          engaged = engaged || std::max(m, shift) != std::max(m, tm);
        }
      }
      const T m_new = std::max(m, shift);
      const T corr = m == neg_inf ? T(0) : exp_diff<M>(m, m_new);
      for (std::int64_t j = 0; j < n; ++j) p[j] = exp_diff<M>(s[j], m_new);
      if (cnt)
        for (std::int64_t j = 0; j < n_real; ++j) cnt->pbar_one_entries += p[j] == T(1);
      if constexpr (is_seed<M>) {
        // Tile results are bf16 matmul outputs; the running values are updated in bf16.
        // The tile's row sum is clamped below at bf16(1e-10), as the paper's code does.
        const float ls = M == Mode::seed ? sequential_sum(p.data(), n) : lane_order_sum(p.data(), n);
        l = bf(bf(l * corr) + std::max(bf(ls), kSeedRowSumFloor));
        std::fill(part.begin(), part.end(), 0.f);
        if constexpr (M == Mode::seed) {
          for (std::int64_t j = 0; j < n; ++j) {
            const float pj = p[j];
            const float* vr = v + (j0 + j) * d;
            for (std::int64_t c = 0; c < d; ++c) part[c] += pj * vr[c];
          }
        } else {
          std::vector<float>& vc = col;  // column c of the tile's V
          for (std::int64_t c = 0; c < d; ++c) {
            for (std::int64_t j = 0; j < n; ++j) vc[static_cast<std::size_t>(j)] = v[(j0 + j) * d + c];
            part[c] = mma_accumulate(0.f, p.data(), vc.data(), static_cast<int>(n));
          }
        }
        for (std::int64_t c = 0; c < d; ++c) acc[c] = bf(bf(acc[c] * corr) + bf(part[c]));
      } else if constexpr (M == Mode::fa2) {
        // The kernels: each of the four lanes of a row's quad keeps its own share of l (keys
        // j0 + 8 n + 2 q and + 1 of n-tile n), rescaled per tile and summed (0 + 1) + (2 + 3) at
        // the end; acc += bf16(P-bar) V in k16 tensor-core steps over the tile's keys.
        for (float& lq : lpart) lq *= corr;
        lane_order_add(lpart, p.data(), n);
        for (std::int64_t c = 0; c < d; ++c) acc[c] *= corr;
        for (std::int64_t k0 = 0; k0 < n; k0 += 16) {
          const int w = static_cast<int>(std::min<std::int64_t>(16, n - k0));
          float pk[16];
          for (int j = 0; j < w; ++j) pk[j] = bf(p[k0 + j]);
          for (std::int64_t c = 0; c < d; ++c) {
            float vk[16];
            for (int j = 0; j < w; ++j) vk[j] = v[(j0 + k0 + j) * d + c];
            acc[c] = mma_accumulate(acc[c], pk, vk, w);
          }
        }
      } else {
        // FA2: rescale the accumulators, then accumulate this tile's terms into them.
        l *= corr;
        for (std::int64_t j = 0; j < n; ++j) l += p[j];
        for (std::int64_t c = 0; c < d; ++c) acc[c] *= corr;
        for (std::int64_t j = 0; j < n; ++j) {
          const T pj = mma_p<M>(p[j], hs.fp8, true);
          const float* vr = v + (j0 + j) * d;
          for (std::int64_t c = 0; c < d; ++c) acc[c] += pj * static_cast<T>(vr[c]);
        }
      }
      m = m_new;
    }
    if constexpr (M == Mode::fa2) l = (lpart[0] + lpart[1]) + (lpart[2] + lpart[3]);
    if constexpr (M != Mode::hp) {
      if (stochastic_o) {
        const std::uint64_t base = static_cast<std::uint64_t>((hs.head * N + i) * d);
        for (std::int64_t c = 0; c < d; ++c)
          o[i * d + c] = bf16_to_float(sr_bf16_bits(acc[c] / l, sr_random_bits(hs.fix.seed, base + static_cast<std::uint64_t>(c))));
      } else {
        for (std::int64_t c = 0; c < d; ++c) o[i * d + c] = out_round<M>(acc[c] / l);
      }
    } else {
      for (std::int64_t c = 0; c < d; ++c) o[i * d + c] = acc[c] / l;
    }
    if constexpr (is_seed<M>) lse[i] = bf(m + bf(std::log(l)));
    else if constexpr (M == Mode::fp32) lse[i] = m + log_fp32(l);
    else lse[i] = m + std::log(l);
    if (cnt) {
      cnt->rows += 1;
      if (row_count >= 2) {
        cnt->repeated_max_rows += 1;
        cnt->zero_max_repeated_rows += row_max == T(0);
      }
      cnt->fix_engaged_rows += engaged;
    }
  }
}

// delta_i = rowsum(dO .* O) with the policy's rounding.
template <Mode M>
void deltas(const HeadShape& hs, const float* dout, const Real<M>* o, Real<M>* delta) {
  using T = Real<M>;
  for (std::int64_t i = 0; i < hs.N; ++i) {
    T acc = T(0);
    for (std::int64_t c = 0; c < hs.d; ++c) {
      const T prod = static_cast<T>(dout[i * hs.d + c]) * o[i * hs.d + c];
      if constexpr (is_seed<M>) acc += bf(prod);
      else acc += prod;
    }
    if constexpr (is_seed<M>) acc = bf(acc);
    delta[i] = acc;
  }
}

// seed_mma's backward: seed's roundings (docs/reference/attention-numerics.md) with every product a chain
// of tensor-core k16 steps, as the kernels form them: S and dP over the feature index; per query
// block of Br rows and key tile of Bc keys, dQ's partial over the tile's keys (from its first
// key), dV's and dK's over the block's rows (from its first row). Masked pairs are zero products,
// which the MMA model (and the hardware) leaves out.
inline void backward_seed_mma(const HeadShape& hs, const float* q, const float* kt, const float* vt, const float* dout,
                              const float* lse, const float* delta, float* dq, float* dk, float* dv) {
  constexpr Mode M = Mode::seed_mma;
  const std::int64_t N = hs.N, d = hs.d, Br = hs.tile_q, Bc = hs.tile_k;
  const auto nd = static_cast<std::size_t>(N * d);
  std::fill(dq, dq + nd, 0.f);
  std::fill(dk, dk + nd, 0.f);
  std::fill(dv, dv + nd, 0.f);
  std::vector<float> vrows(nd);
  for (std::int64_t j = 0; j < N; ++j)
    for (std::int64_t c = 0; c < d; ++c) vrows[static_cast<std::size_t>(j * d + c)] = vt[c * N + j];
  const auto blk = static_cast<std::size_t>(Br * Bc);
  std::vector<float> P(blk), DS(blk), s(static_cast<std::size_t>(Bc)), gT(static_cast<std::size_t>(d * Br)),
      qT(static_cast<std::size_t>(d * Br)), pc(static_cast<std::size_t>(Br)), dsc(static_cast<std::size_t>(Br));
  const float alpha = static_cast<float>(hs.scale);
  for (std::int64_t i0 = 0; i0 < N; i0 += Br) {
    const std::int64_t i1 = std::min(N, i0 + Br), rows = i1 - i0;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < d; ++c) {
        gT[static_cast<std::size_t>(c * Br + r)] = dout[(i0 + r) * d + c];
        qT[static_cast<std::size_t>(c * Br + r)] = q[(i0 + r) * d + c];
      }
    const std::int64_t kmax = hs.causal ? i1 : N;
    for (std::int64_t j0 = 0; j0 < kmax; j0 += Bc) {
      const std::int64_t j1b = std::min(kmax, j0 + Bc);
      std::fill(P.begin(), P.end(), 0.f);
      std::fill(DS.begin(), DS.end(), 0.f);
      for (std::int64_t i = i0; i < i1; ++i) {
        const std::int64_t j1 = hs.causal ? std::min(j1b, i + 1) : j1b;
        if (j1 <= j0) continue;
        const std::int64_t n = j1 - j0;
        float* pr = P.data() + (i - i0) * Bc;
        float* dsr = DS.data() + (i - i0) * Bc;
        scores<M>(hs, q + i * d, kt, j0, j1, s.data());
        for (std::int64_t j = 0; j < n; ++j) {
          pr[j] = exp_diff<M>(s[static_cast<std::size_t>(j)], lse[i]);
          const float dp = mma_accumulate(0.f, dout + i * d, vrows.data() + (j0 + j) * d, static_cast<int>(d));
          dsr[j] = bf(bf(pr[j] * alpha) * bf(bf(dp) - delta[i]));
        }
        for (std::int64_t c = 0; c < d; ++c) {
          const float part = mma_accumulate(0.f, dsr, kt + c * N + j0, static_cast<int>(n));
          dq[i * d + c] = bf(dq[i * d + c] + bf(part));
        }
      }
      for (std::int64_t j = j0; j < j1b; ++j) {
        for (std::int64_t r = 0; r < rows; ++r) {
          pc[static_cast<std::size_t>(r)] = P[static_cast<std::size_t>(r * Bc + j - j0)];
          dsc[static_cast<std::size_t>(r)] = DS[static_cast<std::size_t>(r * Bc + j - j0)];
        }
        for (std::int64_t c = 0; c < d; ++c) {
          const float pv = mma_accumulate(0.f, pc.data(), gT.data() + c * Br, static_cast<int>(rows));
          const float pk = mma_accumulate(0.f, dsc.data(), qT.data() + c * Br, static_cast<int>(rows));
          dv[j * d + c] = bf(dv[j * d + c] + bf(pv));
          dk[j * d + c] = bf(dk[j * d + c] + bf(pk));
        }
      }
    }
  }
}

// Backward. vt is V transposed (d x N). Outputs dq, dk, dv: N x d.
template <Mode M>
void backward_head(const HeadShape& hs, const float* q, const float* k, const float* kt, const float* vt,
                   const float* dout, const Real<M>* lse, const Real<M>* delta, Real<M>* dq, Real<M>* dk,
                   Real<M>* dv) {
  if constexpr (M == Mode::seed_mma) return backward_seed_mma(hs, q, kt, vt, dout, lse, delta, dq, dk, dv);
  using T = Real<M>;
  const std::int64_t N = hs.N, d = hs.d, Br = hs.tile_q, Bc = hs.tile_k;
  const auto nd = static_cast<std::size_t>(N * d);
  std::fill(dq, dq + nd, T(0));
  std::fill(dk, dk + nd, T(0));
  std::fill(dv, dv + nd, T(0));
  std::vector<T> s(static_cast<std::size_t>(Bc)), p(static_cast<std::size_t>(Bc)), dp(static_cast<std::size_t>(Bc)),
      ds(static_cast<std::size_t>(Bc));
  // seed only: per-block partial sums, rounded to bf16 before they join the running values.
  std::vector<T> dv_part, dk_part, dq_part;
  if constexpr (M == Mode::seed) {
    dv_part.resize(static_cast<std::size_t>(Bc * d));
    dk_part.resize(static_cast<std::size_t>(Bc * d));
    dq_part.resize(static_cast<std::size_t>(d));
  }
  for (std::int64_t i0 = 0; i0 < N; i0 += Br) {
    const std::int64_t i1 = std::min(N, i0 + Br);
    const std::int64_t kmax = hs.causal ? i1 : N;
    for (std::int64_t j0 = 0; j0 < kmax; j0 += Bc) {
      const std::int64_t j1b = std::min(kmax, j0 + Bc);
      if constexpr (M == Mode::seed) {
        std::fill(dv_part.begin(), dv_part.end(), 0.f);
        std::fill(dk_part.begin(), dk_part.end(), 0.f);
      }
      for (std::int64_t i = i0; i < i1; ++i) {
        const std::int64_t j1 = hs.causal ? std::min(j1b, i + 1) : j1b;
        if (j1 <= j0) continue;
        const std::int64_t n = j1 - j0;
        scores<M>(hs, q + i * d, kt, j0, j1, s.data());
        for (std::int64_t j = 0; j < n; ++j) p[j] = exp_diff<M>(s[j], lse[i]);
        for (std::int64_t j = 0; j < n; ++j) dp[j] = T(0);
        for (std::int64_t c = 0; c < d; ++c) {
          const T g = static_cast<T>(dout[i * d + c]);
          const float* vr = vt + c * N + j0;
          for (std::int64_t j = 0; j < n; ++j) dp[j] += g * static_cast<T>(vr[j]);
        }
        for (std::int64_t j = 0; j < n; ++j) {
          // seed: dS = bf16(bf16(P alpha) bf16(dP - delta)), the scale inside (no final scaling).
          if constexpr (M == Mode::seed) ds[j] = bf(bf(p[j] * static_cast<float>(hs.scale)) * bf(bf(dp[j]) - delta[i]));
          else ds[j] = p[j] * (dp[j] - delta[i]);
        }
        const float* qi = q + i * d;
        const float* gi = dout + i * d;
        if constexpr (M == Mode::seed) {
          std::fill(dq_part.begin(), dq_part.end(), 0.f);
          for (std::int64_t j = 0; j < n; ++j) {
            const float* kr = k + (j0 + j) * d;
            for (std::int64_t c = 0; c < d; ++c) dq_part[c] += ds[j] * kr[c];
            float* dvp = dv_part.data() + j * d;
            float* dkp = dk_part.data() + j * d;
            for (std::int64_t c = 0; c < d; ++c) {
              dvp[c] += p[j] * gi[c];
              dkp[c] += ds[j] * qi[c];
            }
          }
          for (std::int64_t c = 0; c < d; ++c) dq[i * d + c] = bf(dq[i * d + c] + bf(dq_part[c]));
        } else {
          T* dqi = dq + i * d;
          for (std::int64_t j = 0; j < n; ++j) {
            const T pm = mma_p<M>(p[j], hs.fp8, false);
            const T dsm = mma_ds<M>(ds[j]);
            const float* kr = k + (j0 + j) * d;
            T* dvj = dv + (j0 + j) * d;
            T* dkj = dk + (j0 + j) * d;
            for (std::int64_t c = 0; c < d; ++c) {
              dqi[c] += dsm * static_cast<T>(kr[c]);
              dvj[c] += pm * static_cast<T>(gi[c]);
              dkj[c] += dsm * static_cast<T>(qi[c]);
            }
          }
        }
      }
      if constexpr (M == Mode::seed) {
        for (std::int64_t j = j0; j < j1b; ++j)
          for (std::int64_t c = 0; c < d; ++c) {
            dv[j * d + c] = bf(dv[j * d + c] + bf(dv_part[(j - j0) * d + c]));
            dk[j * d + c] = bf(dk[j * d + c] + bf(dk_part[(j - j0) * d + c]));
          }
      }
    }
  }
  for (std::size_t x = 0; x < nd; ++x) {
    if constexpr (M == Mode::hp) {
      dq[x] *= hs.scale;
      dk[x] *= hs.scale;
    } else {
      const float sc = M == Mode::seed ? 1.0f : static_cast<float>(hs.scale);
      dq[x] = out_round<M>(sc * dq[x]);
      dk[x] = out_round<M>(sc * dk[x]);
      dv[x] = out_round<M>(dv[x]);
    }
  }
}

}  // namespace lpdiag::detail
