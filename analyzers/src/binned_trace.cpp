#include "lpdiag/analyzers/binned_trace.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "lpdiag/error.hpp"
#include "lpdiag/trace/trace_reader.hpp"

namespace lpdiag::analysis {

std::size_t BinnedTrace::layer_slot(std::int64_t layer_index) const {
  const auto it = std::find(layers.begin(), layers.end(), layer_index);
  if (it == layers.end()) throw InvalidArgument("no attention layer " + std::to_string(layer_index));
  return static_cast<std::size_t>(it - layers.begin());
}

std::int64_t BinnedTrace::bin_step(int bin) const {
  const StepBin& s = steps[static_cast<std::size_t>(bin)];
  if (s.last_step >= s.first_step) return s.first_step;
  return first_step + static_cast<std::int64_t>(std::llround(bin * bin_width));
}

namespace {

constexpr std::int64_t kChunk = 8192;

bool measured(double x) { return std::isfinite(x); }

}  // namespace

BinnedTrace bin_traces(const std::vector<std::string>& paths, int max_bins, const Progress& progress) {
  if (paths.empty()) throw InvalidArgument("no trace given");
  if (max_bins < 8) throw InvalidArgument("max_bins must be >= 8");
  std::vector<TraceReader> readers;
  for (const auto& p : paths) readers.emplace_back(p);

  BinnedTrace bt;
  bt.files = paths;
  bool any = false;
  std::map<std::int64_t, std::int64_t> heads_of;
  for (const auto& r : readers) {
    for (const auto& a : r.layout().attention) {
      auto [it, inserted] = heads_of.emplace(a.layer_index, a.n_heads);
      if (!inserted && it->second != a.n_heads)
        throw InputError(r.path() + ": attention layer " + std::to_string(a.layer_index) + " has " +
                         std::to_string(a.n_heads) + " heads, another file says " + std::to_string(it->second));
    }
    const std::int64_t n = r.records();
    bt.records += n;
    if (n == 0) continue;
    const std::int64_t f = r.steps(0, 1)[0], l = r.steps(n - 1, 1)[0];
    if (!any) bt.first_step = f, bt.last_step = l, any = true;
    bt.first_step = std::min(bt.first_step, f);
    bt.last_step = std::max(bt.last_step, l);
  }
  for (const auto& [layer, h] : heads_of) {
    bt.layers.push_back(layer);
    bt.heads = std::max(bt.heads, h);
  }
  const std::int64_t span = any ? bt.last_step - bt.first_step + 1 : 1;
  bt.bins = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(max_bins, span)));
  bt.bin_width = static_cast<double>(span) / bt.bins;
  const auto L = bt.layers.size();
  const auto H = static_cast<std::size_t>(bt.heads);
  const auto K = static_cast<std::size_t>(bt.bins);
  bt.steps.assign(K, StepBin{});
  for (auto& s : bt.steps) s.first_step = INT64_MAX;
  bt.head_bins.assign(L * H * K, HeadBin{});
  bt.layer_bins.assign(L * K, LayerBin{});

  std::int64_t done = 0;
  for (const auto& r : readers) {
    const std::int64_t n = r.records();
    // What this file has, resolved once.
    struct Att {
      std::size_t slot;
      std::int64_t layer_index, heads;
    };
    std::vector<Att> atts;
    for (const auto& a : r.layout().attention) atts.push_back({bt.layer_slot(a.layer_index), a.layer_index, a.n_heads});
    struct Q {
      std::size_t slot;
      std::string name;
      std::int64_t heads;
    };
    std::vector<Q> qs;
    for (const MatrixSpec* m : r.matrices("attn_q"))
      if (m->layer_index >= 0 && heads_of.count(m->layer_index)) qs.push_back({bt.layer_slot(m->layer_index), m->name, m->n_heads});
    const bool has_loss = r.has_series("/scalars/loss");

    for (std::int64_t r0 = 0; r0 < n; r0 += kChunk) {
      const std::int64_t m = std::min(kChunk, n - r0);
      const auto steps = r.steps(r0, m);
      std::vector<std::size_t> bin(static_cast<std::size_t>(m));
      for (std::int64_t i = 0; i < m; ++i) {
        const double x = double(steps[i] - bt.first_step) / bt.bin_width;
        bin[i] = std::min<std::size_t>(K - 1, static_cast<std::size_t>(std::max(0.0, x)));
        StepBin& sb = bt.steps[bin[i]];
        sb.first_step = std::min(sb.first_step, steps[i]);
        sb.last_step = std::max(sb.last_step, steps[i]);
      }
      if (has_loss) {
        const auto loss = r.series("/scalars/loss", r0, m);
        for (std::int64_t i = 0; i < m; ++i) {
          StepBin& sb = bt.steps[bin[i]];
          // NaN is the trace's "not measured"; an infinite loss is an explosion.
          if (std::isfinite(loss[i])) sb.loss_sum += loss[i], sb.loss_n += 1;
          else if (std::isinf(loss[i])) sb.loss_nonfinite += 1;
        }
      }
      for (const Att& a : atts) {
        // Only the nine counters the links use (of seventeen), read as doubles.
        const std::string g = "/attention/" + r.attention_layer(a.layer_index)->name + "/";
        const auto rows = r.series(g + "rows", r0, m), rep = r.series(g + "repeated_max_rows", r0, m);
        const auto oc = r.series(g + "o_err_count", r0, m), os = r.series(g + "o_err_sum", r0, m),
                   oss = r.series(g + "o_err_sumsq", r0, m);
        const auto dc = r.series(g + "delta_err_count", r0, m), ds = r.series(g + "delta_err_sum", r0, m),
                   dss = r.series(g + "delta_err_sumsq", r0, m);
        const auto lm = r.series(g + "logit_max", r0, m);
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t h = 0; h < a.heads; ++h) {
            const auto x = static_cast<std::size_t>(i * a.heads + h);
            HeadBin& b = bt.head_bins[(a.slot * H + static_cast<std::size_t>(h)) * K + bin[i]];
            if (rows[x] > 0 && rep[x] >= 0) b.rows += rows[x], b.repeated += rep[x];
            if (oc[x] > 0 && measured(os[x]) && measured(oss[x])) b.o_count += oc[x], b.o_sum += os[x], b.o_sumsq += oss[x];
            if (dc[x] > 0 && measured(ds[x]) && measured(dss[x])) b.d_count += dc[x], b.d_sum += ds[x], b.d_sumsq += dss[x];
            if (std::isfinite(lm[x])) b.logit_max = std::max(b.logit_max, lm[x]);
          }
      }
      for (const Q& q : qs) {
        const std::string w = "/weights/" + q.name + "/", u = "/updates/" + q.name + "/";
        const auto sig = r.series(w + "spectral_norm", r0, m);
        for (std::int64_t i = 0; i < m; ++i)
          if (measured(sig[i])) bt.layer_bins[q.slot * K + bin[i]].sigma_sum += sig[i], bt.layer_bins[q.slot * K + bin[i]].sigma_n += 1;
        if (q.heads > 0) {
          bt.has_head_sigma = true;
          const auto hs = r.series(w + "head_spectral_norm", r0, m);
          for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t h = 0; h < std::min(q.heads, bt.heads); ++h) {
              const double v = hs[static_cast<std::size_t>(i * q.heads + h)];
              if (!measured(v)) continue;
              HeadBin& b = bt.head_bins[(q.slot * H + static_cast<std::size_t>(h)) * K + bin[i]];
              b.sigma_sum += v, b.sigma_n += 1;
            }
        }
        const auto conc = r.series(u + "concentration", r0, m);
        const auto sim = r.series(u + "similarity_prev", r0, m);
        for (std::int64_t i = 0; i < m; ++i) {
          LayerBin& lb = bt.layer_bins[q.slot * K + bin[i]];
          if (measured(conc[i])) lb.conc_sum += conc[i], lb.conc_n += 1, bt.has_updates = true;
          if (measured(sim[i])) lb.sim_sum += sim[i], lb.sim_n += 1;
        }
      }
      done += m;
      if (progress && bt.records > 0) progress(double(done) / double(bt.records));
    }
  }
  return bt;
}

}  // namespace lpdiag::analysis
