#include "lpdiag/analyzers/binned_trace.hpp"
#include "lpdiag/trace/trace_schema.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "lpdiag/error.hpp"
#include "lpdiag/trace/step_order.hpp"
#include "binning_steps.hpp"

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

constexpr std::int64_t kChunk = 8192;       // rows per read: eight of the writer's chunks
constexpr std::int64_t kForkRows = 1 << 18;  // fewer rows than this are binned in-process

bool measured(double x) { return std::isfinite(x); }

// Reads in flight, not cores: a cold trace is read as ~100 KB chunks scattered over the file,
// and each worker waits on one at a time. On the 2-core machine, 16 workers analyze a cold
// 1M-step trace in under 9 s where 4 took 12.6 s and 1 took 17-19 s (docs/results/performance.md).
// Memory is about 20 MB per worker (PSS).
constexpr int kDefaultWorkers = 16;

}  // namespace

namespace detail {

BinnedTrace plan_bins(const std::vector<std::string>& paths, const std::vector<TraceReader>& readers, int max_bins) {
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
  const auto K = static_cast<std::size_t>(bt.bins);
  bt.steps.assign(K, StepBin{});
  for (auto& s : bt.steps) s.first_step = INT64_MAX;
  bt.head_bins.assign(bt.layers.size() * static_cast<std::size_t>(bt.heads) * K, HeadBin{});
  bt.layer_bins.assign(bt.layers.size() * K, LayerBin{});
  return bt;
}

void bin_rows(const TraceReader& r, const RowRange& range, BinnedTrace& bt, const std::function<void(std::int64_t)>& rows_done) {
  const auto H = static_cast<std::size_t>(bt.heads);
  const auto K = static_cast<std::size_t>(bt.bins);
  // What this file has, resolved once.
  struct Att {
    std::size_t slot;
    std::string group;
    std::int64_t heads;
  };
  std::vector<Att> atts;
  for (const auto& a : r.layout().attention) atts.push_back({bt.layer_slot(a.layer_index), schema::attention_group(a.name), a.n_heads});
  struct Q {
    std::size_t slot;
    std::string name;
    std::int64_t heads;
  };
  std::vector<Q> qs;
  for (const MatrixSpec* m : r.matrices("attn_q"))
    if (m->layer_index >= 0 && std::count(bt.layers.begin(), bt.layers.end(), m->layer_index))
      qs.push_back({bt.layer_slot(m->layer_index), m->name, m->n_heads});
  const bool has_loss = r.has_series(schema::scalar_path("loss"));

  // Buffers reused across blocks; counts are read as stored (int64), sums as doubles.
  std::vector<std::int64_t> steps, rows, rep, oc, dc;
  std::vector<double> loss, os, oss, ds, dss, sig, hs, conc, sim, lm;
  std::vector<std::size_t> bin;
  std::int64_t max_heads = 0;
  for (const Att& a : atts) max_heads = std::max(max_heads, a.heads);
  std::vector<HeadBin> acc(static_cast<std::size_t>(max_heads));
  // /step must increase strictly (docs/reference/trace-format.md): checked here as the rows are read, from the
  // row before the range on, so every worker's share joins up with the previous one.
  std::int64_t prev = range.row0 > 0 ? r.steps(range.row0 - 1, 1)[0] : INT64_MIN;
  for (std::int64_t r0 = range.row0; r0 < range.row1; r0 += kChunk) {
    const std::int64_t m = std::min(kChunk, range.row1 - r0);
    r.read_counts(schema::kStepPath, r0, m, steps);
    check_step_order(r.path(), r0, steps.data(), static_cast<std::size_t>(m), prev);
    bin.resize(static_cast<std::size_t>(m));
    for (std::int64_t i = 0; i < m; ++i) {
      const double x = double(steps[i] - bt.first_step) / bt.bin_width;
      bin[i] = std::min<std::size_t>(K - 1, static_cast<std::size_t>(std::max(0.0, x)));
      StepBin& sb = bt.steps[bin[i]];
      sb.first_step = std::min(sb.first_step, steps[i]);
      sb.last_step = std::max(sb.last_step, steps[i]);
    }
    if (has_loss) {
      r.read_series(schema::scalar_path("loss"), r0, m, loss);
      for (std::int64_t i = 0; i < m; ++i) {
        StepBin& sb = bt.steps[bin[i]];
        // NaN is the trace's "not measured"; an infinite loss is an explosion.
        if (std::isfinite(loss[i])) sb.loss_sum += loss[i], sb.loss_n += 1;
        else if (std::isinf(loss[i])) sb.loss_nonfinite += 1, sb.first_nonfinite_step = std::min(sb.first_nonfinite_step, steps[i]);
      }
    }
    for (const Att& a : atts) {
      // Only the eight counters the links use (of seventeen).
      const std::string& g = a.group;
      r.read_counts(g + schema::kRows, r0, m, rows), r.read_counts(g + schema::kRepeatedMaxRows, r0, m, rep);
      if (bt.read_o_error) {
        r.read_counts(g + schema::kOErrCount, r0, m, oc), r.read_series(g + schema::kOErrSum, r0, m, os);
        r.read_series(g + schema::kOErrSumsq, r0, m, oss);
      } else {
        oc.assign(static_cast<std::size_t>(m * a.heads), 0);
      }
      r.read_counts(g + schema::kDeltaErrCount, r0, m, dc), r.read_series(g + schema::kDeltaErrSum, r0, m, ds);
      r.read_series(g + schema::kDeltaErrSumsq, r0, m, dss);
      const bool logits = r.has_series(g + schema::kLogitMax);
      if (logits) r.read_series(g + schema::kLogitMax, r0, m, lm);
      // Rows of one bin are consecutive: sum them per head in `acc` (contiguous, where the
      // bins of one time step are a bin-count apart) and add each run's sums once.
      for (std::int64_t i = 0; i < m;) {
        const std::size_t k = bin[static_cast<std::size_t>(i)];
        std::fill(acc.begin(), acc.end(), HeadBin{});
        for (; i < m && bin[static_cast<std::size_t>(i)] == k; ++i)
          for (std::int64_t h = 0; h < a.heads; ++h) {
            const auto x = static_cast<std::size_t>(i * a.heads + h);
            HeadBin& b = acc[static_cast<std::size_t>(h)];
            const bool o_read = x < oss.size();  // O error sums are read only for the report
            bt.other_impossible += (rows[x] < -1) + (rep[x] < -1) + (oc[x] < -1) + (dc[x] < -1) + (o_read && oss[x] < 0) + (dss[x] < 0);
            if (rows[x] > 0 && rep[x] > rows[x]) ++bt.rates_above_one;
            else if (rows[x] > 0 && rep[x] >= 0) b.rows += double(rows[x]), b.repeated += double(rep[x]);
            if (o_read && oc[x] > 0 && measured(os[x]) && measured(oss[x]) && oss[x] >= 0) b.o_count += double(oc[x]), b.o_sum += os[x], b.o_sumsq += oss[x];
            if (dc[x] > 0 && measured(ds[x]) && measured(dss[x]) && dss[x] >= 0) b.d_count += double(dc[x]), b.d_sum += ds[x], b.d_sumsq += dss[x];
            // logit_max is a max of |S|-sized scores: negative or NaN is unmeasured, +Inf kept.
            if (logits && lm[x] >= 0) b.logit_max = std::max(b.logit_max, lm[x]);
          }
        for (std::int64_t h = 0; h < a.heads; ++h) {
          HeadBin& b = bt.head_bins[(a.slot * H + static_cast<std::size_t>(h)) * K + k];
          const HeadBin& s = acc[static_cast<std::size_t>(h)];
          b.rows += s.rows, b.repeated += s.repeated;
          b.o_count += s.o_count, b.o_sum += s.o_sum, b.o_sumsq += s.o_sumsq;
          b.d_count += s.d_count, b.d_sum += s.d_sum, b.d_sumsq += s.d_sumsq;
          b.logit_max = std::max(b.logit_max, s.logit_max);
          if (s.logit_max >= 0) bt.has_logits = true;
        }
      }
    }
    for (const Q& q : qs) {
      const std::string w = schema::weight_group(q.name), u = schema::update_group(q.name);
      r.read_series(w + schema::kSpectralNorm, r0, m, sig);
      for (std::int64_t i = 0; i < m; ++i) {
        if (sig[i] < 0) ++bt.negative_norms;
        else if (measured(sig[i])) bt.layer_bins[q.slot * K + bin[i]].sigma_sum += sig[i], bt.layer_bins[q.slot * K + bin[i]].sigma_n += 1;
      }
      if (q.heads > 0) {
        bt.has_head_sigma = true;
        r.read_series(w + schema::kHeadSpectralNorm, r0, m, hs);
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t h = 0; h < std::min(q.heads, bt.heads); ++h) {
            const double v = hs[static_cast<std::size_t>(i * q.heads + h)];
            if (v < 0) ++bt.negative_norms;
            if (!measured(v) || v < 0) continue;
            HeadBin& b = bt.head_bins[(q.slot * H + static_cast<std::size_t>(h)) * K + bin[i]];
            b.sigma_sum += v, b.sigma_n += 1;
          }
      }
      r.read_series(u + schema::kConcentration, r0, m, conc);
      r.read_series(u + schema::kSimilarityPrev, r0, m, sim);
      for (std::int64_t i = 0; i < m; ++i) {
        LayerBin& lb = bt.layer_bins[q.slot * K + bin[i]];
        // Both lie in [0, 1] by definition (docs/reference/trace-format.md); anything else is impossible.
        const bool conc_ok = measured(conc[i]) && conc[i] >= 0 && conc[i] <= 1 + 1e-9;
        const bool sim_ok = measured(sim[i]) && sim[i] >= 0 && sim[i] <= 1 + 1e-9;
        bt.other_impossible += (measured(conc[i]) && !conc_ok) + (measured(sim[i]) && !sim_ok);
        if (conc_ok) lb.conc_sum += conc[i], lb.conc_n += 1, bt.has_updates = true;
        if (sim_ok) lb.sim_sum += sim[i], lb.sim_n += 1;
      }
    }
    if (rows_done) rows_done(m);
  }
}

void bin_ranges(const std::vector<TraceReader>& readers, const std::vector<RowRange>& ranges, std::size_t begin,
                std::size_t end, BinnedTrace& bt, const std::function<void(std::int64_t)>& rows_done) {
  for (std::size_t i = begin; i < end;) {
    RowRange run = ranges[i++];
    while (i < end && ranges[i].file == run.file && ranges[i].row0 == run.row1) run.row1 = ranges[i++].row1;
    bin_rows(readers[run.file], run, bt, rows_done);
  }
}

void merge_bins(BinnedTrace& into, const BinnedTrace& part) {
  if (into.steps.size() != part.steps.size() || into.head_bins.size() != part.head_bins.size() ||
      into.layer_bins.size() != part.layer_bins.size())
    throw InvalidArgument("merge_bins: partial result of another plan");
  for (std::size_t k = 0; k < into.steps.size(); ++k) {
    StepBin& a = into.steps[k];
    const StepBin& b = part.steps[k];
    a.first_step = std::min(a.first_step, b.first_step);
    a.last_step = std::max(a.last_step, b.last_step);
    a.loss_sum += b.loss_sum, a.loss_n += b.loss_n, a.loss_nonfinite += b.loss_nonfinite;
    a.first_nonfinite_step = std::min(a.first_nonfinite_step, b.first_nonfinite_step);
  }
  for (std::size_t k = 0; k < into.head_bins.size(); ++k) {
    HeadBin& a = into.head_bins[k];
    const HeadBin& b = part.head_bins[k];
    a.rows += b.rows, a.repeated += b.repeated;
    a.o_count += b.o_count, a.o_sum += b.o_sum, a.o_sumsq += b.o_sumsq;
    a.d_count += b.d_count, a.d_sum += b.d_sum, a.d_sumsq += b.d_sumsq;
    a.sigma_sum += b.sigma_sum, a.sigma_n += b.sigma_n;
    a.logit_max = std::max(a.logit_max, b.logit_max);
  }
  for (std::size_t k = 0; k < into.layer_bins.size(); ++k) {
    LayerBin& a = into.layer_bins[k];
    const LayerBin& b = part.layer_bins[k];
    a.conc_sum += b.conc_sum, a.conc_n += b.conc_n;
    a.sim_sum += b.sim_sum, a.sim_n += b.sim_n;
    a.sigma_sum += b.sigma_sum, a.sigma_n += b.sigma_n;
  }
  into.has_head_sigma = into.has_head_sigma || part.has_head_sigma;
  into.has_updates = into.has_updates || part.has_updates;
  into.has_logits = into.has_logits || part.has_logits;
  into.rates_above_one += part.rates_above_one, into.negative_norms += part.negative_norms;
  into.other_impossible += part.other_impossible;
}

// nan_inf events (few, read whole) mark non-finite values the rows cannot show: a NaN loss is
// "not measured" in the rows, and the event says it was computed. The first one, from the rows
// or an event, is the run's non-finite onset.
void add_nonfinite_events(const std::vector<std::vector<TraceEvent>>& events, BinnedTrace& bt) {
  const auto K = static_cast<std::size_t>(bt.bins);
  std::int64_t first = INT64_MAX;
  std::string what;
  for (std::size_t k = 0; k < K; ++k)
    if (bt.steps[k].first_nonfinite_step < first) first = bt.steps[k].first_nonfinite_step, what = "an infinite loss";
  for (const auto& file_events : events)
    for (const TraceEvent& e : file_events) {
      if (e.kind != "nan_inf") continue;
      const double x = double(e.step - bt.first_step) / bt.bin_width;
      StepBin& sb = bt.steps[std::min<std::size_t>(K - 1, static_cast<std::size_t>(std::max(0.0, x)))];
      sb.loss_nonfinite += 1;
      sb.first_nonfinite_step = std::min(sb.first_nonfinite_step, e.step);
      if (e.step < first) first = e.step, what = "a nan_inf event (" + e.message + ")";
    }
  if (first != INT64_MAX) bt.first_nonfinite_step = first, bt.nonfinite_evidence = what;
}

void add_live_loss_alarm(const std::vector<std::vector<TraceEvent>>& events, BinnedTrace& bt) {
  static const std::string prefix = "loss_explosion: ";
  for (const auto& file_events : events)
    for (const TraceEvent& e : file_events) {
      if (e.kind != "alarm" || e.message.rfind(prefix, 0) != 0) continue;
      if (bt.live_loss_alarm_step < 0 || e.step < bt.live_loss_alarm_step)
        bt.live_loss_alarm_step = e.step, bt.live_loss_alarm = e.message.substr(prefix.size());
    }
}

// Each file's events are read once, for both uses.
void add_events(const std::vector<TraceReader>& readers, BinnedTrace& bt) {
  std::vector<std::vector<TraceEvent>> events;
  for (const auto& r : readers) events.push_back(r.events());
  add_nonfinite_events(events, bt);
  add_live_loss_alarm(events, bt);
}

}  // namespace detail

BinnedTrace bin_traces(const std::vector<std::string>& paths, int max_bins, const Progress& progress, int workers, bool o_error) {
  if (paths.empty()) throw InvalidArgument("no trace given");
  if (max_bins < 8) throw InvalidArgument("max_bins must be >= 8");
  if (workers < 0) throw InvalidArgument("workers must be >= 0 (0: choose)");
  std::vector<TraceReader> readers;
  for (const auto& p : paths) readers.emplace_back(p);
  BinnedTrace bt = detail::plan_bins(paths, readers, max_bins);
  bt.read_o_error = o_error;

  // Contiguous shares of kChunk-aligned row ranges, so no two workers read the same chunk.
  std::vector<detail::RowRange> ranges;
  for (std::size_t f = 0; f < readers.size(); ++f)
    for (std::int64_t r0 = 0, n = readers[f].records(); r0 < n; r0 += kChunk) ranges.push_back({f, r0, std::min(n, r0 + kChunk)});
  if (workers == 0) workers = bt.records >= kForkRows ? kDefaultWorkers : 1;
  workers = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(workers), ranges.size()));
  for (const auto& r : readers) r.hint_sparse_reads();
  if (workers > 1 && detail::bin_in_workers(readers, ranges, workers, bt, progress)) {
    detail::add_events(readers, bt);
    return bt;
  }

  std::int64_t done = 0;
  detail::bin_ranges(readers, ranges, 0, ranges.size(), bt, [&](std::int64_t n) {
    done += n;
    if (progress && bt.records > 0) progress(double(done) / double(bt.records));
  });
  detail::add_events(readers, bt);
  return bt;
}

}  // namespace lpdiag::analysis
