#include "lpdiag/observe/observer.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <thread>

#include "lpdiag/error.hpp"
#include "lpdiag/stats/error_accumulator.hpp"

namespace lpdiag {
namespace {

std::string shape_text(const ObservedCall& c) {
  return "B " + std::to_string(c.B) + ", Hq " + std::to_string(c.Hq) + ", Hkv " + std::to_string(c.Hkv) + ", Nq " +
         std::to_string(c.Nq) + ", Nk " + std::to_string(c.Nk) + ", d " + std::to_string(c.d);
}

struct HeadWork {
  HeadCounters counters;
  ErrorAccumulator o_err;
};

// One (batch, head): rows, ties and logit max from the fp32 S, and O - O_exact.
void observe_head(const ObservedCall& c, std::int64_t b, std::int64_t h, float* err, HeadWork& w) {
  const std::int64_t d = c.d, Nq = c.Nq, Nk = c.Nk;
  const std::int64_t hk = h / (c.Hq / c.Hkv);
  const float* q = c.q + ((b * c.Hq + h) * Nq) * d;
  const float* o = c.o + ((b * c.Hq + h) * Nq) * d;
  const float* k = c.k + ((b * c.Hkv + hk) * Nk) * d;
  const float* v = c.v + ((b * c.Hkv + hk) * Nk) * d;
  const double scale = c.scale > 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(d));
  const float scale32 = static_cast<float>(scale);
  std::vector<double> s(static_cast<std::size_t>(Nk)), acc(static_cast<std::size_t>(d));
  HeadCounters& cnt = w.counters;
  for (std::int64_t i = 0; i < Nq; ++i) {
    const std::int64_t nk = c.causal ? i + 1 : Nk;
    float max32 = -std::numeric_limits<float>::infinity();
    std::int64_t ties = 0;
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < nk; ++j) {
      double dot = 0.0;
      for (std::int64_t x = 0; x < d; ++x) dot += static_cast<double>(q[i * d + x]) * static_cast<double>(k[j * d + x]);
      const float s32 = scale32 * static_cast<float>(dot);
      if (s32 > max32) max32 = s32, ties = 1;
      else if (s32 == max32) ++ties;
      s[static_cast<std::size_t>(j)] = scale * dot;
      m = std::max(m, s[static_cast<std::size_t>(j)]);
    }
    cnt.rows += 1;
    if (ties >= 2) {
      cnt.repeated_max_rows += 1;
      cnt.zero_max_repeated_rows += max32 == 0.0f;
    }
    cnt.logit_max = std::max(cnt.logit_max, max32);
    std::fill(acc.begin(), acc.end(), 0.0);
    double l = 0.0;
    for (std::int64_t j = 0; j < nk; ++j) {
      const double p = std::exp(s[static_cast<std::size_t>(j)] - m);
      l += p;
      for (std::int64_t x = 0; x < d; ++x) acc[static_cast<std::size_t>(x)] += p * static_cast<double>(v[j * d + x]);
    }
    for (std::int64_t x = 0; x < d; ++x) {
      const double e = static_cast<double>(o[i * d + x]) - acc[static_cast<std::size_t>(x)] / l;
      w.o_err.add(e);
      err[i * d + x] = static_cast<float>(e);
    }
  }
}

void set_o_errors(HeadCounters& h, const ErrorAccumulator& e) {
  h.o_err_count = e.count();
  h.o_err_pos = e.positive();
  h.o_err_neg = e.negative();
  h.o_err_sum = e.sum();
  h.o_err_sumsq = e.sumsq();
}

void set_delta_errors(HeadCounters& h, const ErrorAccumulator& e) {
  h.delta_err_count = e.count();
  h.delta_err_pos = e.positive();
  h.delta_err_neg = e.negative();
  h.delta_err_sum = e.sum();
  h.delta_err_sumsq = e.sumsq();
}

}  // namespace

void check_observed_call(const ObservedCall& c, bool pointers) {
  if (pointers && (!c.q || !c.k || !c.v || !c.o)) throw InvalidArgument("observer: q, k, v and the kernel's output o are required");
  if (c.B < 1 || c.Hq < 1 || c.Hkv < 1 || c.Nq < 1 || c.Nk < 1 || c.d < 1)
    throw InvalidArgument("observer: every dimension must be positive (" + shape_text(c) + ")");
  if (c.Hq % c.Hkv)
    throw InvalidArgument("observer: q's " + std::to_string(c.Hq) + " heads are not a multiple of k/v's " + std::to_string(c.Hkv) +
                          " (grouped-query attention maps q head h to k/v head h / (Hq / Hkv))");
  if (c.causal && c.Nq != c.Nk)
    throw InvalidArgument("observer: a causal call with " + std::to_string(c.Nq) + " queries and " + std::to_string(c.Nk) +
                          " keys (causal calls are observed only with as many queries as keys)");
  if (c.head_mask && c.Hq > 64) throw InvalidArgument("observer: a head subset needs at most 64 heads, the call has " + std::to_string(c.Hq));
  if (!(c.scale >= 0.0) || !std::isfinite(c.scale)) throw InvalidArgument("observer: the scale must be finite and >= 0 (0: 1/sqrt(d))");
}

ObservedForward observe_forward(const ObservedCall& c, int threads) {
  check_observed_call(c);
  const std::int64_t Bo = c.observed_batches(), nd = c.Nq * c.d;
  ObservedForward out;
  out.o_error.assign(static_cast<std::size_t>(Bo * c.Hq * nd), 0.0f);
  std::vector<HeadWork> work(static_cast<std::size_t>(Bo * c.Hq));
  std::atomic<std::int64_t> next{0};
  auto worker = [&] {
    for (std::int64_t x; (x = next.fetch_add(1)) < Bo * c.Hq;) {
      const std::int64_t b = x / c.Hq, h = x % c.Hq;
      if (c.observes_head(h)) observe_head(c, b, h, out.o_error.data() + x * nd, work[static_cast<std::size_t>(x)]);
    }
  };
  int n = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  n = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(n, Bo * c.Hq)));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  // Merge in (batch, head) order: the result does not depend on scheduling.
  out.heads.assign(static_cast<std::size_t>(c.Hq), HeadCounters{});
  std::vector<ErrorAccumulator> o_err(static_cast<std::size_t>(c.Hq));
  for (std::int64_t x = 0; x < Bo * c.Hq; ++x) {
    const auto h = static_cast<std::size_t>(x % c.Hq);
    const HeadWork& w = work[static_cast<std::size_t>(x)];
    HeadCounters part = w.counters;
    part.o_err_count = part.o_err_pos = part.o_err_neg = 0, part.o_err_sum = part.o_err_sumsq = 0.0;
    out.heads[h] += part;
    o_err[h].merge(w.o_err);
  }
  for (std::size_t h = 0; h < out.heads.size(); ++h) set_o_errors(out.heads[h], o_err[h]);
  return out;
}

std::vector<HeadCounters> observe_backward(const float* dout, const std::vector<float>& o_error, std::int64_t batches,
                                           std::int64_t Hq, std::int64_t Nq, std::int64_t d, std::uint64_t head_mask) {
  if (!dout) throw InvalidArgument("observer: the backward needs dO");
  if (batches < 1 || Hq < 1 || Nq < 1 || d < 1 || o_error.size() != static_cast<std::size_t>(batches * Hq * Nq * d))
    throw InvalidArgument("observer: the forward's O error holds " + std::to_string(o_error.size()) + " values, not " +
                          std::to_string(batches) + " x " + std::to_string(Hq) + " x " + std::to_string(Nq) + " x " + std::to_string(d));
  std::vector<HeadCounters> heads(static_cast<std::size_t>(Hq));
  for (std::int64_t h = 0; h < Hq; ++h) {
    HeadCounters& hc = heads[static_cast<std::size_t>(h)];
    hc.logit_max = -std::numeric_limits<float>::infinity();
    if (head_mask && !((head_mask >> h) & 1u)) continue;
    ErrorAccumulator acc;
    for (std::int64_t b = 0; b < batches; ++b) {
      const std::int64_t base = ((b * Hq + h) * Nq) * d;
      for (std::int64_t i = 0; i < Nq; ++i) {
        double s = 0.0;
        for (std::int64_t x = 0; x < d; ++x)
          s += static_cast<double>(dout[base + i * d + x]) * static_cast<double>(o_error[static_cast<std::size_t>(base + i * d + x)]);
        acc.add(s);
      }
    }
    set_delta_errors(hc, acc);
  }
  return heads;
}

}  // namespace lpdiag
