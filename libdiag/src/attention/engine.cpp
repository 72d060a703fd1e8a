#include "lpdiag/attention/engine.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include "lpdiag/error.hpp"
#include "lpdiag/numerics/convert.hpp"
#include "tiled_head.hpp"

namespace lpdiag {
namespace {

using detail::HeadShape;
using detail::Mode;

struct HeadWork {
  HeadCounters counters;
  ErrorAccumulator o_err, delta_err;
  std::vector<ErrorAccumulator> o_err_col;
};

template <Mode M>
void run_lp(const HeadShape& hs, const float* q, const float* k, const float* kt, const float* vt, const float* v,
            const float* dout, bool backward, float* o, float* lse, float* dq, float* dk, float* dv,
            std::vector<float>& delta, HeadCounters* cnt) {
  detail::forward_head<M>(hs, q, kt, v, o, lse, cnt);
  if (dout) {
    delta.resize(static_cast<std::size_t>(hs.N));
    detail::deltas<M>(hs, dout, o, delta.data());
  }
  if (backward) detail::backward_head<M>(hs, q, k, kt, vt, dout, lse, delta.data(), dq, dk, dv);
}

// O - O_hp per element and per column, delta - delta_hp per row, for one head.
void add_head_errors(std::int64_t N, std::int64_t d, const double* o_hp, const double* delta_hp, const float* o,
                     const float* delta, ErrorAccumulator& o_err, std::vector<ErrorAccumulator>& o_err_col,
                     ErrorAccumulator& delta_err) {
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t c = 0; c < d; ++c) {
      const double e = static_cast<double>(o[i * d + c]) - o_hp[i * d + c];
      o_err.add(e);
      o_err_col[static_cast<std::size_t>(c)].add(e);
    }
  if (delta)
    for (std::int64_t i = 0; i < N; ++i) delta_err.add(static_cast<double>(delta[i]) - delta_hp[i]);
}

void run_head(const AttentionConfig& cfg, const HeadShape& hs, const AttentionOptions& opt, const float* q,
              const float* k, const float* v, const float* dout, float* o, float* lse, float* dq, float* dk,
              float* dv, double* o_hp_out, double* delta_hp_out, HeadWork& w) {
  const std::int64_t N = hs.N, d = hs.d;
  std::vector<float> kt(static_cast<std::size_t>(N * d)), vt(static_cast<std::size_t>(N * d));
  for (std::int64_t j = 0; j < N; ++j)
    for (std::int64_t c = 0; c < d; ++c) {
      kt[c * N + j] = k[j * d + c];
      vt[c * N + j] = v[j * d + c];
    }
  std::vector<float> delta;
  w.counters = HeadCounters{};
  switch (cfg.policy) {
    case Policy::fa2_sequential: run_lp<Mode::fa2_seq>(hs, q, k, kt.data(), vt.data(), v, dout, opt.backward, o, lse, dq, dk, dv, delta, &w.counters); break;
    case Policy::fa2: run_lp<Mode::fa2>(hs, q, k, kt.data(), vt.data(), v, dout, opt.backward, o, lse, dq, dk, dv, delta, &w.counters); break;
    case Policy::seed: run_lp<Mode::seed>(hs, q, k, kt.data(), vt.data(), v, dout, opt.backward, o, lse, dq, dk, dv, delta, &w.counters); break;
    case Policy::seed_mma: run_lp<Mode::seed_mma>(hs, q, k, kt.data(), vt.data(), v, dout, opt.backward, o, lse, dq, dk, dv, delta, &w.counters); break;
    case Policy::fp32: run_lp<Mode::fp32>(hs, q, k, kt.data(), vt.data(), v, dout, opt.backward, o, lse, dq, dk, dv, delta, &w.counters); break;
    case Policy::fp8_p: run_lp<Mode::fp8>(hs, q, k, kt.data(), vt.data(), v, dout, opt.backward, o, lse, dq, dk, dv, delta, &w.counters); break;
  }
  if (!opt.instrument) {
    w.counters.o_err_count = w.counters.o_err_pos = w.counters.o_err_neg = -1;
    w.counters.delta_err_count = w.counters.delta_err_pos = w.counters.delta_err_neg = -1;
    w.counters.o_err_sum = w.counters.o_err_sumsq = w.counters.delta_err_sum = w.counters.delta_err_sumsq = std::nan("");
    return;
  }
  // hp: the same tiling in fp64, nothing rounded, the plain running max (softmax is shift
  // invariant, so the fix changes nothing in exact arithmetic and must not change the reference).
  HeadShape hp = hs;
  hp.fix = FixConfig{};
  std::vector<double> o_hp(static_cast<std::size_t>(N * d)), lse_hp(static_cast<std::size_t>(N));
  detail::forward_head<Mode::hp>(hp, q, kt.data(), v, o_hp.data(), lse_hp.data(), nullptr);
  w.o_err_col.assign(static_cast<std::size_t>(d), ErrorAccumulator{});
  std::vector<double> delta_hp(static_cast<std::size_t>(N));
  if (dout) detail::deltas<Mode::hp>(hp, dout, o_hp.data(), delta_hp.data());
  add_head_errors(N, d, o_hp.data(), delta_hp.data(), o, dout ? delta.data() : nullptr, w.o_err, w.o_err_col,
                  w.delta_err);
  if (o_hp_out) std::copy(o_hp.begin(), o_hp.end(), o_hp_out);
  if (delta_hp_out) std::copy(delta_hp.begin(), delta_hp.end(), delta_hp_out);
  HeadCounters& c = w.counters;
  c.o_err_count = w.o_err.count();
  c.o_err_pos = w.o_err.positive();
  c.o_err_neg = w.o_err.negative();
  c.o_err_sum = w.o_err.sum();
  c.o_err_sumsq = w.o_err.sumsq();
  c.delta_err_count = w.delta_err.count();
  c.delta_err_pos = w.delta_err.positive();
  c.delta_err_neg = w.delta_err.negative();
  c.delta_err_sum = w.delta_err.sum();
  c.delta_err_sumsq = w.delta_err.sumsq();
}

std::int64_t count_nonfinite(const std::vector<float>& x) {
  std::int64_t n = 0;
  for (float v : x) n += !std::isfinite(v);
  return n;
}

}  // namespace

AttentionRun run_attention(const AttentionConfig& cfg, const AttentionInputs& in, const AttentionOptions& opt) {
  if (in.B < 1 || in.H < 1 || in.N < 1 || in.d < 1)
    throw InvalidArgument("attention: B, H, N and d must be positive (got " + std::to_string(in.B) + ", " +
                          std::to_string(in.H) + ", " + std::to_string(in.N) + ", " + std::to_string(in.d) + ")");
  if (!in.q || !in.k || !in.v) throw InvalidArgument("attention: q, k and v are required");
  if (opt.backward && !in.dout) throw InvalidArgument("attention: the backward pass needs dout");
  if (cfg.tile_q < 1 || cfg.tile_k < 1) throw InvalidArgument("attention: tile sizes must be >= 1");
  HeadShape hs;
  hs.N = in.N;
  hs.d = in.d;
  hs.tile_q = cfg.tile_q;
  hs.tile_k = cfg.tile_k;
  hs.causal = cfg.causal;
  hs.scale = cfg.scale > 0 ? cfg.scale : 1.0 / std::sqrt(static_cast<double>(in.d));
  hs.fix = cfg.fix;
  hs.fp8 = &format(cfg.fp8_format);

  const std::int64_t heads = in.B * in.H;
  const auto nd = static_cast<std::size_t>(in.N * in.d);
  AttentionRun run;
  run.o.resize(static_cast<std::size_t>(heads) * nd);
  run.lse.resize(static_cast<std::size_t>(heads * in.N));
  if (opt.backward) {
    run.dq.resize(run.o.size());
    run.dk.resize(run.o.size());
    run.dv.resize(run.o.size());
  }
  const bool keep = opt.keep_reference && opt.instrument;
  if (keep) {
    run.o_hp.resize(run.o.size());
    run.delta_hp.resize(in.dout ? run.lse.size() : 0);
  }
  run.d = in.d;
  std::vector<HeadWork> work(static_cast<std::size_t>(heads));
  std::atomic<std::int64_t> next{0};
  auto worker = [&] {
    for (std::int64_t h; (h = next.fetch_add(1)) < heads;) {
      const std::size_t off = static_cast<std::size_t>(h) * nd;
      HeadShape hsh = hs;
      hsh.head = h;
      run_head(cfg, hsh, opt, in.q + off, in.k + off, in.v + off, in.dout ? in.dout + off : nullptr, run.o.data() + off,
               run.lse.data() + h * in.N, opt.backward ? run.dq.data() + off : nullptr,
               opt.backward ? run.dk.data() + off : nullptr, opt.backward ? run.dv.data() + off : nullptr,
               keep ? run.o_hp.data() + off : nullptr, keep && in.dout ? run.delta_hp.data() + h * in.N : nullptr,
               work[static_cast<std::size_t>(h)]);
    }
  };
  int threads = opt.threads > 0 ? opt.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(threads, heads)));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();

  // Merge in head order, so results do not depend on scheduling.
  run.heads.assign(static_cast<std::size_t>(in.H), HeadCounters{});
  run.o_err_by_column.assign(static_cast<std::size_t>(in.d), ErrorAccumulator{});
  for (std::int64_t h = 0; h < heads; ++h) {
    const HeadWork& w = work[static_cast<std::size_t>(h)];
    HeadCounters& dst = run.heads[static_cast<std::size_t>(h % in.H)];
    if (h < in.H) dst = w.counters;
    else dst += w.counters;
    run.o_err.merge(w.o_err);
    run.delta_err.merge(w.delta_err);
    for (std::size_t c = 0; c < w.o_err_col.size(); ++c) run.o_err_by_column[c].merge(w.o_err_col[c]);
  }
  run.nan_count = count_nonfinite(run.o) + count_nonfinite(run.lse) + count_nonfinite(run.dq) +
                  count_nonfinite(run.dk) + count_nonfinite(run.dv);
  return run;
}

OutputErrors output_errors(const AttentionRun& ref, const float* o, const float* dout) {
  if (ref.o_hp.empty() || ref.d < 1)
    throw InvalidArgument("output_errors: the reference run was made without keep_reference");
  if (dout && ref.delta_hp.empty()) throw InvalidArgument("output_errors: the reference run had no dO");
  const std::int64_t d = ref.d, rows = static_cast<std::int64_t>(ref.o_hp.size()) / d;
  OutputErrors out;
  out.o_err_by_column.assign(static_cast<std::size_t>(d), ErrorAccumulator{});
  std::vector<float> delta;
  if (dout) {
    delta.resize(static_cast<std::size_t>(rows));
    // The fa2 policy's delta: fp32 products summed in column order.
    for (std::int64_t i = 0; i < rows; ++i) {
      float acc = 0.f;
      for (std::int64_t c = 0; c < d; ++c) acc += dout[i * d + c] * o[i * d + c];
      delta[static_cast<std::size_t>(i)] = acc;
    }
  }
  add_head_errors(rows, d, ref.o_hp.data(), ref.delta_hp.data(), o, dout ? delta.data() : nullptr, out.o_err,
                  out.o_err_by_column, out.delta_err);
  for (std::int64_t x = 0; x < rows * d; ++x) out.nan_count += !std::isfinite(o[x]);
  return out;
}

std::vector<float> correctly_rounded_output(const AttentionRun& ref) {
  if (ref.o_hp.empty()) throw InvalidArgument("correctly_rounded_output: the run was made without keep_reference");
  const FloatFormat& bf = format(FormatId::bf16);
  std::vector<float> o(ref.o_hp.size());
  for (std::size_t x = 0; x < o.size(); ++x) o[x] = static_cast<float>(round_to(ref.o_hp[x], bf));
  return o;
}

}  // namespace lpdiag
