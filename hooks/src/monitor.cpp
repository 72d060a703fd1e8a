#include "monitor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "lpdiag/error.hpp"
#include "lpdiag/hooks/counter_sink.hpp"
#include "lpdiag/trace/capture.hpp"
#include "pending_counters.hpp"
#include "stats_stream.hpp"

namespace lpdiag::hooks {

// Power iteration on the weight's own device, warm-started from the previous record. It never
// synchronizes: a cold start runs 30 iterations, a warm start 2 (the weights move little between
// records; spectral normalization gets by with one per step), and sigma stays a device scalar
// until the record's values are fetched together.
// Batched: w is (batch, rows, cols), one independent iteration per matrix (the heads of W_Q).
// Each iteration reads W twice (y = W v, x = W^T y); nothing else does: the last iteration's y
// and x give u = y / |y| and sigma = |x| / |y| = |W^T u|, which is the better of the two estimates
// at hand (its error is (sigma_2^2 - sigma_2^4 / sigma_1^2) / (sigma_1^2 - sigma_2^2) times that
// of |W v|). The weights' passes, not FLOPs, are what a record costs on the GPU.
struct Power {
  torch::Tensor v, u, sigma;  // v (batch, cols, 1), u (batch, rows, 1), sigma (batch)
  void run(const torch::Tensor& w) {
    const bool cold = !v.defined() || v.size(0) != w.size(0) || v.size(1) != w.size(2);
    if (cold) v = torch::ones({w.size(0), w.size(2), 1}, w.options()) / std::sqrt(double(w.size(2)));
    const double tiny = 1e-30;
    const torch::Tensor wt = w.transpose(1, 2);
    torch::Tensor y, x, xn;
    for (int it = 0, n = cold ? 30 : 2; it < n; ++it) {
      y = torch::bmm(w, v);
      x = torch::bmm(wt, y);
      xn = x.norm(2, {1, 2}, true);
      v = x / (xn + tiny);
    }
    const torch::Tensor yn = y.norm(2, {1, 2}, true);
    u = y / (yn + tiny);
    sigma = (xn / (yn + tiny)).reshape({-1});  // 0 for a zero matrix
  }
};

// What a record still waits for: device scalars bound for its fields, and the attention counters
// of the calls since the last record. The Monitor copies everything to the host at once: on a
// side stream without waiting (CUDA weights), or in line.
struct Monitor::Fetch {
  struct Dst {
    double* d = nullptr;
    float* f = nullptr;
  };
  std::vector<torch::Tensor> values;
  std::vector<Dst> dst;
  PendingCounters counters;
  bool counters_due = false;  // the attention signal is due: the counters go into the record
  void add(const torch::Tensor& t, double* d) { add(t, std::vector<double*>{d}); }
  // t holds one value per destination, in order.
  void add(const torch::Tensor& t, const std::vector<double*>& d) {
    values.push_back(t.detach().reshape({-1}));
    for (double* p : d) dst.push_back({p, nullptr});
  }
  void add(const torch::Tensor& t, const std::vector<float*>& d) {
    values.push_back(t.detach().reshape({-1}));
    for (float* p : d) dst.push_back({nullptr, p});
  }
  // The device tensors to copy: the values in one fp64 vector (widened once; the statistics are
  // fp32 computations), then the raw counters.
  std::vector<torch::Tensor> parts() const {
    std::vector<torch::Tensor> p;
    if (!values.empty()) p.push_back(torch::cat(values).to(torch::kFloat64));
    if (counters.device_bytes.defined()) p.push_back(counters.device_bytes);
    return p;
  }
  // Given parts() on the host: fills the fields and returns the counters by layer.
  CountersByLayer land(const std::vector<torch::Tensor>& host) {
    TORCH_CHECK(host.size() == parts_count(), "lpdiag.Monitor: ", host.size(), " parts arrived for ", parts_count());
    if (!values.empty()) {
      const torch::Tensor h = host.front().to(torch::kFloat64).contiguous();
      TORCH_CHECK(h.numel() == static_cast<int64_t>(dst.size()), "lpdiag.Monitor: ", h.numel(), " statistics for ",
                  dst.size(), " fields");
      const double* a = h.data_ptr<double>();
      for (std::size_t i = 0; i < dst.size(); ++i) {
        if (dst[i].d) *dst[i].d = a[i];
        else *dst[i].f = static_cast<float>(a[i]);
      }
    }
    return counters.resolve(counters.device_bytes.defined() ? host.back() : torch::Tensor());
  }
  std::size_t parts_count() const { return (values.empty() ? 0 : 1) + (counters.device_bytes.defined() ? 1 : 0); }
  CountersByLayer land_in_line() {  // one copy per part, which waits for the device
    std::vector<torch::Tensor> host;
    for (const torch::Tensor& p : parts()) host.push_back(p.cpu());
    return land(host);
  }
};

struct Monitor::Tracked {
  MatrixSpec spec;
  torch::Tensor weight;  // the parameter; rows [row0, row1) are this matrix
  int64_t row0 = 0, row1 = 0;
};

// Matrices of one shape and device: their statistics run as one batch (48 of GPT-2 small's 61
// matrices are 768 x 768), so a record costs a few dozen kernel launches, not thousands. The
// members with heads (one head count per group) also get the per-head norms.
struct Monitor::Group {
  std::vector<std::size_t> members;  // indices into matrices_ (and the layout's matrices); one shape
  int64_t headed = 0;                // the first `headed` members have heads (and come first)
  int64_t n_heads = 0;               // their head count
  Power whole, delta, heads;
  torch::Tensor prev;            // (G, rows, cols): W at the previous update record, all update stats need
  torch::Tensor prev_u, prev_v;  // (G, rows), (G, cols): the previous update's top singular pair
  // (G, rows, cols) in fp32, a copy. The members' row views are made once and remade only if a
  // parameter's storage moved (model.to(...)): a record then costs one cat, not G slices.
  torch::Tensor stack(const std::vector<std::unique_ptr<Tracked>>& all) {
    bool stale = views.size() != members.size();
    for (std::size_t x = 0; !stale && x < members.size(); ++x) stale = bases[x] != all[members[x]]->weight.data_ptr();
    if (stale) {
      views.clear(), bases.clear();
      for (std::size_t i : members) {
        const Tracked& m = *all[i];
        views.push_back(m.weight.detach().narrow(0, m.row0, m.row1 - m.row0));
        bases.push_back(m.weight.data_ptr());
      }
    }
    torch::Tensor w = torch::cat(views, 0);
    if (w.scalar_type() != torch::kFloat32) w = w.to(torch::kFloat32);
    return w.view({static_cast<int64_t>(members.size()), views.front().size(0), views.front().size(1)});
  }

 private:
  std::vector<torch::Tensor> views;
  std::vector<const void*> bases;
};

Monitor::Monitor(std::string path, int64_t n_layer, int64_t n_head, int64_t head_dim, std::string run_config, int64_t rank,
                 int64_t world_size)
    : run_config_(std::move(run_config)), n_layer_(n_layer), n_head_(n_head), head_dim_(head_dim), rank_(rank),
      world_size_(world_size) {
  TORCH_CHECK(n_layer > 0 && n_head > 0 && head_dim > 0, "lpdiag.Monitor: n_layer, n_head and head_dim must be positive");
  TORCH_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "lpdiag.Monitor: rank ", rank, " is not in [0, ", world_size, ")");
  stem_ = path.size() > 3 && path.substr(path.size() - 3) == ".h5" ? path.substr(0, path.size() - 3) : path;
  if (world_size > 1) stem_ += ".rank" + std::to_string(rank);
  path_ = stem_ + ".h5";
  // Fail now if the trace cannot be written; the writer itself opens at the first record, when
  // the role map is complete.
  {
    std::ofstream probe(path_, std::ios::binary | std::ios::trunc);
    TORCH_CHECK(probe.good(), "lpdiag.Monitor: cannot write the trace ", path_, " (does the directory exist and is it writable?)");
  }
  std::remove(path_.c_str());
  for (int64_t l = 0; l < n_layer; ++l)
    layout_.attention.push_back({"layer." + std::to_string(l) + ".attn", l, n_head, head_dim, "fa2", R"({"kind":"none"})"});
}

Monitor::~Monitor() {
  try {
    close();
  } catch (...) {
  }
}

void Monitor::add_matrix(std::string name, std::string role, int64_t layer, int64_t n_heads, torch::Tensor weight,
                         int64_t row0, int64_t row1) {
  TORCH_CHECK(!writer_, "lpdiag.Monitor: add_matrix after the first record(); register the role map first");
  TORCH_CHECK(is_valid_role(role), "lpdiag.Monitor: unknown role '", role, "'");
  TORCH_CHECK(weight.dim() == 2, "lpdiag.Monitor: weight of ", name, " must be 2-D, got ", weight.sizes());
  TORCH_CHECK(0 <= row0 && row0 < row1 && row1 <= weight.size(0), "lpdiag.Monitor: rows [", row0, ", ", row1, ") of ", name,
              " are outside its ", weight.size(0), " rows");
  TORCH_CHECK(n_heads == 0 || (row1 - row0) % n_heads == 0, "lpdiag.Monitor: ", row1 - row0, " rows of ", name,
              " do not split into ", n_heads, " heads");
  auto m = std::make_unique<Tracked>();
  m->spec = {name, role, layer, row1 - row0, weight.size(1), n_heads, name + " rows [" + std::to_string(row0) + ":" + std::to_string(row1) + "]"};
  m->weight = weight;
  m->row0 = row0;
  m->row1 = row1;
  matrices_.push_back(std::move(m));
}

void Monitor::add_fused_qkv(std::string prefix, int64_t layer, torch::Tensor weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.size(0) % 3 == 0, "lpdiag.Monitor: fused c_attn weight must be (3C, C), got ", weight.sizes());
  const int64_t c = weight.size(0) / 3;
  add_matrix(prefix + ".q", "attn_q", layer, n_head_, weight, 0, c);
  add_matrix(prefix + ".k", "attn_k", layer, n_head_, weight, c, 2 * c);
  add_matrix(prefix + ".v", "attn_v", layer, 0, weight, 2 * c, 3 * c);
}

void Monitor::add_activation(std::string name, int64_t layer) {
  TORCH_CHECK(!writer_, "lpdiag.Monitor: add_activation after the first record()");
  activation_names_.push_back(name);
  activation_layers_.push_back(layer);
}

void Monitor::observe_activation(std::string name, torch::Tensor x) {
  torch::NoGradGuard g;
  // Device scalars, no synchronization: record() fetches them with everything else.
  // Two reading passes in fp32, no temporaries: max |x| = |x|_inf, rms = |x|_2 / sqrt(n).
  const torch::Tensor f = x.detach();
  const double inf = std::numeric_limits<double>::infinity();
  activation_values_[name] = torch::stack({torch::linalg_vector_norm(f, inf, c10::nullopt, false, torch::kFloat32),
                                           torch::linalg_vector_norm(f, 2, c10::nullopt, false, torch::kFloat32) /
                                               std::sqrt(static_cast<double>(std::max<int64_t>(1, f.numel())))});
}

void Monitor::set_cadence(std::string signal, int64_t every) {
  TORCH_CHECK(cadence_.count(signal), "lpdiag.Monitor: unknown signal '", signal, "' (weights, updates, attention, activations)");
  TORCH_CHECK(every >= 1, "lpdiag.Monitor: cadence must be >= 1");
  cadence_[signal] = every;
}

void Monitor::set_flush_every(int64_t records) {
  TORCH_CHECK(records >= 1, "lpdiag.Monitor: flush_every must be >= 1");
  flush_every_ = records;
}

void Monitor::set_stop_on_nan(bool stop) { stop_on_nan_ = stop; }

void Monitor::set_capture_trigger(double rate, int64_t max_captures) {
  capture_rate_ = rate;
  captures_left_ = max_captures;
}

void Monitor::request_capture(int64_t layer, int64_t step) {
  CaptureBoard::instance().request({layer, step, capture_file_name(stem_, step, layer)});
}

void Monitor::open_writer() {
  for (const auto& m : matrices_) layout_.matrices.push_back(m->spec);
  for (std::size_t i = 0; i < activation_names_.size(); ++i) layout_.activations.push_back({activation_names_[i], activation_layers_[i]});
  TraceHeader h;
  h.producer = std::string("lpdiag 0.1.0 (libtorch ") + TORCH_VERSION + ")";
  h.run_config = run_config_;
  h.rank = rank_;
  h.world_size = world_size_;
  TraceWriterOptions o;
  o.flush_every = static_cast<int>(flush_every_);
  try {
    writer_ = std::make_unique<TraceWriter>(path_, layout_, h, o);
  } catch (const Error& e) {
    TORCH_CHECK(false, "lpdiag.Monitor: ", e.what());
  }
}

void Monitor::group_matrices() {
  std::map<std::string, std::size_t> by_key;
  for (std::size_t i = 0; i < matrices_.size(); ++i) {
    const Tracked& m = *matrices_[i];
    std::string key = std::to_string(m.spec.rows) + "x" + std::to_string(m.spec.cols) + "@" + m.weight.device().str();
    auto it = by_key.find(key);
    // A second head count for one shape gets a group of its own.
    if (it != by_key.end() && m.spec.n_heads > 0 && groups_[it->second]->n_heads > 0 && groups_[it->second]->n_heads != m.spec.n_heads) {
      key += "/" + std::to_string(m.spec.n_heads);
      it = by_key.find(key);
    }
    if (it == by_key.end()) {
      it = by_key.emplace(key, groups_.size()).first;
      groups_.push_back(std::make_unique<Group>());
    }
    Group& g = *groups_[it->second];
    if (m.spec.n_heads > 0) ++g.headed, g.n_heads = m.spec.n_heads;
    g.members.push_back(i);
  }
  // Matrices with heads first: their per-head norms then read a leading slice of the stack.
  for (auto& g : groups_)
    std::stable_partition(g->members.begin(), g->members.end(), [&](std::size_t i) { return matrices_[i]->spec.n_heads > 0; });
}

void Monitor::weight_stats(Group& g, const torch::Tensor& w, TraceRecord& r, Fetch& f) {
  g.whole.run(w);
  const torch::Tensor fro = w.norm(2, {1, 2});
  std::vector<double*> sn, fr, sr, hs;
  for (std::size_t i : g.members) {
    WeightStats& s = r.weights[i];
    sn.push_back(&s.spectral_norm), fr.push_back(&s.frobenius_norm), sr.push_back(&s.stable_rank);
  }
  f.add(g.whole.sigma, sn);
  f.add(fro, fr);
  f.add(fro * fro / (g.whole.sigma * g.whole.sigma), sr);  // NaN for a zero matrix
  if (g.headed > 0) {
    for (int64_t x = 0; x < g.headed; ++x)
      for (auto& h : r.weights[g.members[static_cast<std::size_t>(x)]].head_spectral_norm) hs.push_back(&h);
    // (headed * heads, rows / heads, cols): a view of the stack's leading matrices.
    g.heads.run(w.narrow(0, 0, g.headed).reshape({-1, w.size(1) / g.n_heads, w.size(2)}));
    f.add(g.heads.sigma, hs);
  }
}

void Monitor::update_stats(Group& g, const torch::Tensor& w, TraceRecord& r, Fetch& f) {
  if (g.prev.defined()) {
    const torch::Tensor d = w - g.prev;
    const torch::Tensor fro = d.norm(2, {1, 2}), fro2 = fro * fro;  // one pass over d
    g.delta.run(d);
    const torch::Tensor sigma = g.delta.sigma;
    std::vector<double*> s1, conc, sim;
    for (std::size_t i : g.members) {
      UpdateStats& u = r.updates[i];
      s1.push_back(&u.sigma1), conc.push_back(&u.concentration), sim.push_back(&u.similarity_prev);
    }
    f.add(sigma, s1);                      // 0 for no update
    f.add(sigma * sigma / fro2, conc);     // NaN for no update
    const torch::Tensor du = g.delta.u.squeeze(2), dv = g.delta.v.squeeze(2);
    if (g.prev_u.defined()) f.add((du * g.prev_u).sum(1).abs() * (dv * g.prev_v).sum(1).abs(), sim);
    g.prev_u = du;
    g.prev_v = dv;
  }
  g.prev = w;  // stack() made a copy; weight_stats only reads it
}

bool Monitor::record(int64_t step, double loss, double lr, double grad_norm) {
  return record(step, torch::scalar_tensor(loss, torch::kFloat64), lr, torch::scalar_tensor(grad_norm, torch::kFloat64));
}

void Monitor::start() {
  open_writer();
  group_matrices();
  // A side stream when every matrix lives on one CUDA device; otherwise in line.
  bool one_cuda = !matrices_.empty();
  for (const auto& m : matrices_) one_cuda = one_cuda && m->weight.is_cuda() && m->weight.device() == matrices_.front()->weight.device();
  if (one_cuda) stream_ = StatsStream::for_device(matrices_.front()->weight.device());
}

void Monitor::add_attention(TraceRecord& r, const CountersByLayer& counters, int64_t next_step) {
  for (std::size_t l = 0; l < layout_.attention.size(); ++l) {
    auto it = counters.find(layout_.attention[l].layer_index);
    if (it == counters.end() || static_cast<int64_t>(it->second.size()) != n_head_) continue;
    for (std::size_t h = 0; h < it->second.size(); ++h) {
      HeadCounters c = it->second[h];
      if (c.o_err_count <= 0) c.o_err_count = c.o_err_pos = c.o_err_neg = -1, c.o_err_sum = c.o_err_sumsq = NAN;
      if (c.delta_err_count <= 0) c.delta_err_count = c.delta_err_pos = c.delta_err_neg = -1, c.delta_err_sum = c.delta_err_sumsq = NAN;
      r.attention[l][h] = c;
      if (next_step >= 0 && capture_rate_ >= 0 && captures_left_ > 0 && c.rows > 0 && double(c.repeated_max_rows) / double(c.rows) > capture_rate_) {
        request_capture(layout_.attention[l].layer_index, next_step);
        --captures_left_;
      }
    }
  }
}

bool Monitor::record(int64_t step, const torch::Tensor& loss, double lr, const torch::Tensor& grad_norm) {
  torch::NoGradGuard no_grad;
  TORCH_CHECK(loss.numel() == 1 && grad_norm.numel() == 1, "lpdiag.Monitor.record: loss and grad_norm must be scalars, got ",
              loss.sizes(), " and ", grad_norm.sizes());
  TORCH_CHECK(loss.is_floating_point() && grad_norm.is_floating_point(),
              "lpdiag.Monitor.record: loss and grad_norm must be floating point, got ", loss.scalar_type(), " and ",
              grad_norm.scalar_type());
  if (!writer_) start();
  finish_pending(step + 1);  // the previous step's statistics have long landed
  auto r = std::make_unique<TraceRecord>(TraceRecord::unmeasured(layout_, step));
  auto fetch = std::make_unique<Fetch>();
  // The loss and gradient norm of a CUDA run come with the statistics, so record() never waits
  // for the device; with stop_on_nan the loss is read now (a wait) to stop at this very step.
  auto scalar = [&](const torch::Tensor& t, double* dst, bool now) {
    if (now || !stream_ || !t.is_cuda()) *dst = t.item<double>();
    else fetch->add(t, dst);
  };
  scalar(loss, &r->scalars[0], stop_on_nan_);
  r->scalars[1] = lr;
  scalar(grad_norm, &r->scalars[2], false);
  auto due = [&](const char* s) { return step % cadence_[s] == 0; };
  const torch::Device* async_device = nullptr;
  torch::Device stream_device = matrices_.empty() ? torch::Device(torch::kCPU) : matrices_.front()->weight.device();
  if (stream_) async_device = &stream_device;
  fetch->counters = PendingCounters::take(async_device);  // drained every step; kept when due
  fetch->counters_due = due("attention");
  const bool stats = due("weights") || due("updates");
  // The copies are taken on the training stream, so the next optimizer step cannot race them.
  std::vector<torch::Tensor> stacked;
  if (stats)
    for (auto& g : groups_) stacked.push_back(g->stack(matrices_));  // update_stats keeps it as the next `prev`
  {
    const auto side = stream_ ? stream_->enter() : nullptr;
    for (std::size_t i = 0; i < stacked.size(); ++i) {
      Group& g = *groups_[i];
      if (stream_) stream_->keep(stacked[i]);
      if (due("weights")) weight_stats(g, stacked[i], *r, *fetch);
      if (due("updates")) update_stats(g, stacked[i], *r, *fetch);
    }
    if (due("activations"))
      for (std::size_t i = 0; i < activation_names_.size(); ++i) {
        auto it = activation_values_.find(activation_names_[i]);
        if (it == activation_values_.end()) continue;
        if (stream_) stream_->keep(it->second);
        fetch->add(it->second, std::vector<float*>{&r->activations[i].max_abs, &r->activations[i].rms});
      }
    if (stream_) {
      for (const torch::Tensor& t : fetch->values) stream_->keep(t);
      if (fetch->counters.device_bytes.defined()) stream_->keep(fetch->counters.device_bytes);
      stream_->fetch(fetch->parts());
    }
  }
  activation_values_.clear();
  for (const auto& p : CaptureBoard::instance().drain_done()) writer_->add_event({step, "capture_written", -1, -1, NAN, p});
  const bool stop = stop_on_nan_ && !std::isfinite(r->scalars[0]);
  pending_record_ = std::move(r);
  pending_fetch_ = std::move(fetch);
  ++records_;
  if (!stream_ || stop) finish_pending(step + 1);  // in line, or a run that stops here
  if (stop) {
    writer_->flush();
    return false;
  }
  return true;
}

void Monitor::finish_pending(int64_t next_step) {
  if (!pending_record_) return;
  TraceRecord& r = *pending_record_;
  Fetch& f = *pending_fetch_;
  const CountersByLayer counters = stream_ && f.parts_count() > 0 ? f.land(stream_->wait()) : f.land_in_line();
  if (f.counters_due) add_attention(r, counters, next_step);
  if (!std::isfinite(r.scalars[0])) writer_->add_event({r.step, "nan_inf", -1, -1, r.scalars[0], "loss is not finite"});
  writer_->append(r);
  pending_record_.reset();
  pending_fetch_.reset();
}

void Monitor::close() {
  if (!writer_) return;
  finish_pending(-1);  // no step follows: a capture would never be written
  writer_->close();
}

}  // namespace lpdiag::hooks
