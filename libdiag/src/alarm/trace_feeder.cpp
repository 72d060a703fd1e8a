// Trace records to AlarmRecords (trace_feeder.hpp): the loss, nan_inf events, and per head the
// rows, repeated-maximum rows and max logit of the attention counters and sigma_1 of the W_Q slice.
#include "lpdiag/alarm/trace_feeder.hpp"

#include <algorithm>
#include <cmath>

#include "lpdiag/trace/trace_schema.hpp"

namespace lpdiag::alarm {

AlarmRecord alarm_record(const TraceLayout& layout, const TraceRecord& r) {
  AlarmRecord a;
  a.step = r.step;
  a.loss = r.scalars.empty() ? kUnmeasured : r.scalars[0];
  // The writer's record was given its loss: NaN there was computed, not unmeasured.
  a.nonfinite_event = !r.scalars.empty() && !std::isfinite(r.scalars[0]);
  for (const auto& l : layout.attention) a.layers.push_back(l.layer_index), a.heads = std::max(a.heads, l.n_heads);
  a.samples.assign(a.layers.size() * static_cast<std::size_t>(a.heads), HeadSample{});
  for (std::size_t l = 0; l < layout.attention.size() && l < r.attention.size(); ++l)
    for (std::size_t h = 0; h < r.attention[l].size() && static_cast<std::int64_t>(h) < a.heads; ++h) {
      const HeadCounters& c = r.attention[l][h];
      auto& s = a.at(l, static_cast<std::int64_t>(h));
      if (c.rows > 0 && c.repeated_max_rows >= 0 && c.repeated_max_rows <= c.rows) s.rows = double(c.rows), s.repeated = double(c.repeated_max_rows);
      if (c.logit_max >= 0) s.logit_max = c.logit_max;
    }
  for (std::size_t m = 0; m < layout.matrices.size() && m < r.weights.size(); ++m) {
    const MatrixSpec& spec = layout.matrices[m];
    if (spec.role != "attn_q" || spec.n_heads <= 0) continue;
    const auto it = std::find(a.layers.begin(), a.layers.end(), spec.layer_index);
    if (it == a.layers.end()) continue;
    const auto slot = static_cast<std::size_t>(it - a.layers.begin());
    const auto& hs = r.weights[m].head_spectral_norm;
    for (std::size_t h = 0; h < hs.size() && static_cast<std::int64_t>(h) < a.heads; ++h)
      if (hs[h] > 0 && std::isfinite(hs[h])) a.at(slot, static_cast<std::int64_t>(h)).sigma = hs[h];
  }
  return a;
}

TraceFeeder::TraceFeeder(const TraceReader& reader, std::int64_t start_row) : r_(reader), next_(start_row) {
  for (const auto& a : r_.layout().attention) {
    layers_.push_back(a.layer_index);
    groups_.push_back(schema::attention_group(a.name));
    layer_heads_.push_back(a.n_heads);
    heads_ = std::max(heads_, a.n_heads);
  }
  for (const MatrixSpec* m : r_.matrices("attn_q")) {
    if (m->n_heads <= 0) continue;
    const auto it = std::find(layers_.begin(), layers_.end(), m->layer_index);
    if (it == layers_.end()) continue;
    const std::string path = schema::weight_group(m->name) + schema::kHeadSpectralNorm;
    if (r_.has_series(path)) qs_.push_back({path, static_cast<std::size_t>(it - layers_.begin()), m->n_heads});
  }
}

std::vector<Alarm> TraceFeeder::feed_new(AlarmDetector& det) {
  std::vector<Alarm> out;
  for (const auto& rec : read_new())
    for (auto& a : det.feed(rec)) out.push_back(std::move(a));
  return out;
}

std::vector<AlarmRecord> TraceFeeder::read_new() {
  std::vector<AlarmRecord> all;
  const std::int64_t n = r_.records();
  if (n <= next_) return all;
  if (r_.event_count() != events_seen_) {  // events are few: read whole when they change
    nonfinite_steps_.clear();
    for (const auto& e : r_.events())
      if (e.kind == "nan_inf") nonfinite_steps_.push_back(e.step);
    std::sort(nonfinite_steps_.begin(), nonfinite_steps_.end());
    events_seen_ = r_.event_count();
  }
  constexpr std::int64_t kBlock = 4096;
  std::vector<double> loss, lm, hs;
  std::vector<std::int64_t> rows, rep;
  const bool has_loss = r_.has_series(schema::scalar_path("loss"));
  for (std::int64_t r0 = next_; r0 < n; r0 += kBlock) {
    const std::int64_t m = std::min(kBlock, n - r0);
    const auto steps = r_.steps(r0, m);
    std::vector<AlarmRecord> recs(static_cast<std::size_t>(m));
    for (std::int64_t i = 0; i < m; ++i) {
      auto& rec = recs[static_cast<std::size_t>(i)];
      rec.step = steps[static_cast<std::size_t>(i)];
      rec.layers = layers_;
      rec.heads = heads_;
      rec.samples.assign(layers_.size() * static_cast<std::size_t>(heads_), HeadSample{});
      rec.nonfinite_event = std::binary_search(nonfinite_steps_.begin(), nonfinite_steps_.end(), rec.step);
    }
    if (has_loss) {
      r_.read_series(schema::scalar_path("loss"), r0, m, loss);
      for (std::int64_t i = 0; i < m; ++i) recs[static_cast<std::size_t>(i)].loss = loss[static_cast<std::size_t>(i)];
    }
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const std::string& g = groups_[l];
      const std::int64_t H = layer_heads_[l];
      r_.read_counts(g + schema::kRows, r0, m, rows);
      r_.read_counts(g + schema::kRepeatedMaxRows, r0, m, rep);
      const bool logits = r_.has_series(g + schema::kLogitMax);
      if (logits) r_.read_series(g + schema::kLogitMax, r0, m, lm);
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t h = 0; h < H; ++h) {
          const auto x = static_cast<std::size_t>(i * H + h);
          auto& s = recs[static_cast<std::size_t>(i)].at(l, h);
          if (rows[x] > 0 && rep[x] >= 0 && rep[x] <= rows[x]) {
            s.rows = double(rows[x]), s.repeated = double(rep[x]);
            has_counters_ = true;
          }
          if (logits && lm[x] >= 0) s.logit_max = lm[x];  // negative or NaN: unmeasured
        }
    }
    for (const Q& q : qs_) {
      r_.read_series(q.path, r0, m, hs);
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t h = 0; h < std::min(q.heads, heads_); ++h) {
          const double v = hs[static_cast<std::size_t>(i * q.heads + h)];
          if (v > 0 && std::isfinite(v)) recs[static_cast<std::size_t>(i)].at(q.slot, h).sigma = v;
        }
    }
    for (auto& rec : recs) all.push_back(std::move(rec));
  }
  next_ = n;
  return all;
}

}  // namespace lpdiag::alarm
