#include "lpdiag/hooks/monitor.hpp"

#include "lpdiag/alarm/readings_json.hpp"
#include "lpdiag/alarm/trace_feeder.hpp"
#include "lpdiag/hooks/guard.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <limits>
#include <thread>

#include "lpdiag/attention/attention_config.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/trace/writer_lock.hpp"
#include "lpdiag/hooks/counter_sink.hpp"
#include "lpdiag/trace/capture.hpp"
#include "matrix_group.hpp"
#include "pending_counters.hpp"
#include "record_fetch.hpp"
#include "stats_stream.hpp"
#include "termination_flush.hpp"

namespace lpdiag::hooks {
namespace {

// run_config with "alarm": `name` added as its last key, when it is a JSON object without one; the
// text otherwise kept as the user wrote it (key order included).
std::string with_alarm_key(const std::string& run_config, const std::string& name) {
  const auto j = nlohmann::json::parse(run_config, nullptr, false);
  if (!j.is_object() || j.contains("alarm")) return run_config;
  const auto close = run_config.find_last_of('}');
  return run_config.substr(0, close) + (j.empty() ? "" : ",") + "\"alarm\":" + nlohmann::json(name).dump() + run_config.substr(close);
}

}  // namespace

struct Monitor::Tracked {
  MatrixSpec spec;
  RowSlice rows;
};

// The statistics of every group for one combination of due signals, captured once the groups
// are steady: the stack copies (replayed on the training stream, so the optimizer cannot race
// them) and the statistics (replayed on the side stream). Replaying costs two launches instead
// of ~60 per group; on a training loop whose host is the bottleneck that is the whole cost.
struct Monitor::StatsGraph {
  std::unique_ptr<StatsStream::Graph> stack, stats;
  std::unique_ptr<TraceRecord> tmpl;  // the captured fields point into it
  torch::Tensor out;                  // the values, fp64, in the order of dst
  std::vector<RecordFetch::Dst> dst;
};

Monitor::Monitor(std::string path, int64_t n_layer, int64_t n_head, int64_t head_dim, std::string run_config, int64_t rank,
                 int64_t world_size, bool overwrite)
    : run_config_(std::move(run_config)), n_layer_(n_layer), n_head_(n_head), head_dim_(head_dim), rank_(rank),
      world_size_(world_size) {
  TORCH_CHECK(n_layer > 0 && n_head > 0 && head_dim > 0, "lpdiag.Monitor: n_layer, n_head and head_dim must be positive");
  TORCH_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "lpdiag.Monitor: rank ", rank, " is not in [0, ", world_size, ")");
  // The path as given. Rank files of a distributed run insert ".rankN" before a ".h5" (or append
  // it); captures are named after the stem.
  const bool h5 = path.size() > 3 && path.substr(path.size() - 3) == ".h5";
  stem_ = h5 ? path.substr(0, path.size() - 3) : path;
  if (world_size > 1) stem_ += ".rank" + std::to_string(rank);
  path_ = h5 || world_size > 1 ? stem_ + (h5 ? ".h5" : "") : path;
  // Fail now if the trace cannot be written; the writer itself opens at the first record, when
  // the role map is complete. Nothing is created, truncated or removed here: the path may be a
  // live trace of another run.
  {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path p = fs::absolute(path_, ec);
    const fs::path dir = p.parent_path();
    TORCH_CHECK(fs::is_directory(dir, ec) && ::access(dir.c_str(), W_OK | X_OK) == 0, "lpdiag.Monitor: cannot write the trace ", path_,
                " (does the directory exist and is it writable?)");
    TORCH_CHECK(!path.empty() && path.back() != '/' && !fs::is_directory(p, ec), "lpdiag.Monitor: ", path.empty() ? "''" : path,
                " is a directory; give the trace a file name (e.g. run.h5)");
    TORCH_CHECK(!fs::exists(p, ec) || (fs::is_regular_file(p, ec) && ::access(p.c_str(), W_OK) == 0), "lpdiag.Monitor: ", path_,
                " exists and is not a writable file");
    TORCH_CHECK(!WriterLock::held_by_another(path_), "lpdiag.Monitor: ", path_,
                " is being recorded by another writer now; give this run another path (it was left untouched)");
    TORCH_CHECK(overwrite || !fs::exists(p, ec), "lpdiag.Monitor: ", path_,
                " already exists; it was left untouched (pass overwrite=True to replace it, or give this run another path)");
  }
  // Until the first record says otherwise, the next forward is step 0 (a run that resumes at step
  // k > 0 says so with set_start_step).
  for (int64_t l = 0; l < n_layer; ++l)
    layout_.attention.push_back({"layer." + std::to_string(l) + ".attn", l, n_head, head_dim, "fa2", R"({"kind":"none"})"});
  session_base_ = acquire_session();  // last: a constructor that throws holds no session
  CaptureBoard::instance().set_step(session_base_, 0);
}

Monitor::~Monitor() {
  if (last_resort_id_ != 0) termination::remove_last_resort(last_resort_id_);
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
  m->rows = {weight, row0, row1};
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
  // Two reading passes in fp32, no temporaries, two launches: max |x| = |x|_inf and |x|_2; the
  // rms, |x|_2 / sqrt(n), is taken on the host when the values land. They run on the training
  // stream: on a side stream they would race an in-place change of x later in the forward.
  const torch::Tensor f = x.detach();
  const double inf = std::numeric_limits<double>::infinity();
  activation_values_[name] = {torch::linalg_vector_norm(f, inf, c10::nullopt, false, torch::kFloat32),
                              torch::linalg_vector_norm(f, 2, c10::nullopt, false, torch::kFloat32),
                              1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(1, f.numel())))};
}

void Monitor::set_cadence(std::string signal, int64_t every) {
  TORCH_CHECK(cadence_.count(signal), "lpdiag.Monitor: unknown signal '", signal, "' (weights, updates, attention, activations)");
  TORCH_CHECK(every >= 1, "lpdiag.Monitor: cadence must be >= 1");
  cadence_[signal] = every;
}

void Monitor::set_attention_numerics(int64_t layer, std::string policy, std::string fix) {
  TORCH_CHECK(!writer_, "lpdiag.Monitor: set_attention_numerics after the first record()");
  TORCH_CHECK(0 <= layer && layer < n_layer_, "lpdiag.Monitor: layer ", layer, " is not in [0, ", n_layer_, ")");
  if (policy.rfind("external", 0) != 0) {
    try {
      (void)parse_policy_spec(policy);
    } catch (const Error& e) {
      TORCH_CHECK(false, "lpdiag.Monitor: ", e.what(), " (or external[:<backend>] for attention lpdiag does not run)");
    }
  }
  auto& a = layout_.attention[static_cast<std::size_t>(layer)];
  a.policy = std::move(policy);
  a.fix = parse_fix(fix).to_json();
  declared_.insert(layer);
}

void Monitor::set_flush_every(int64_t records) {
  TORCH_CHECK(records >= 1, "lpdiag.Monitor: flush_every must be >= 1");
  flush_every_ = records;
  if (writer_) writer_->set_flush_every(static_cast<int>(records));  // a live trace takes it from the next record
}

void Monitor::set_compression(int64_t level) {
  TORCH_CHECK(!writer_, "lpdiag.Monitor: set_compression after the first record()");
  TORCH_CHECK(0 <= level && level <= 9, "lpdiag.Monitor: compression must be a deflate level 0..9, got ", level);
  compression_ = level;
}

void Monitor::set_stop_on_nan(bool stop) { stop_on_nan_ = stop; }

void Monitor::set_cuda_graphs(bool on) {
  use_graphs_ = on;
  if (!on) graphs_.clear();
}

void Monitor::set_capture_trigger(double rate, int64_t max_captures) {
  capture_rate_ = rate;
  captures_left_ = max_captures;
}

void Monitor::set_observe_every(int64_t every) {
  TORCH_CHECK(every >= 0, "lpdiag.Monitor.set_observe_every: every must be >= 0 (0: not observed), got ", every);
  observe_every_ = every;
}

std::string Monitor::recorded_spec(int64_t layer_index, const std::string& json) {
  if (json.find("\"observed\":true") == std::string::npos) return json;
  observed_.insert(layer_index);
  auto j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded()) return json;
  j["observe_every"] = observe_every_;
  return j.dump();
}

void Monitor::set_start_step(int64_t step) {
  TORCH_CHECK(step >= 0, "lpdiag.Monitor.set_start_step: step must be >= 0, got ", step);
  TORCH_CHECK(records_ == 0, "lpdiag.Monitor.set_start_step: call it before the first record (", records_,
              " records written)");
  CaptureBoard::instance().set_step(session_base_, step);
}

void Monitor::request_capture(int64_t layer, int64_t step) {
  CaptureBoard::instance().request({session_base_ + layer, step, capture_file_name(stem_, step, layer)});
}

void Monitor::open_writer() {
  for (const auto& m : matrices_) layout_.matrices.push_back(m->spec);
  for (std::size_t i = 0; i < activation_names_.size(); ++i) layout_.activations.push_back({activation_names_[i], activation_layers_[i]});
  TraceHeader h;
  h.producer = std::string("lpdiag 0.1.0 (libtorch ") + TORCH_VERSION + ")";
  h.run_config = with_alarm_key(run_config_, detector_ ? alarm_thresholds_ : "off");
  h.rank = rank_;
  h.world_size = world_size_;
  TraceWriterOptions o;
  o.flush_every = static_cast<int>(flush_every_);
  o.compression = static_cast<int>(compression_);
  // One chunk per flush: a flushed chunk is complete and never rewritten. A partly filled chunk
  // rewritten at every flush leaves its old copy behind as unreclaimed space in the file (with
  // deflate, a fresh copy per flush: a 1500-record GPT-2-small trace grew to 310 MB).
  o.chunk_rows = std::clamp<std::int64_t>(flush_every_, 1, 1024);
  // record() never waits for the disk: each flush is written on the writer's own thread (on the
  // 2-core CPU machine the flush was 89% of record()'s host time; docs/results/performance.md).
  o.background_flush = true;
  try {
    writer_ = std::make_unique<TraceWriter>(path_, layout_, h, o);
  } catch (const Error& e) {
    // A full disk or a file-size limit at creation must not end the training run: say it once
    // and go on without a trace (a second writer on a live trace is refused at construction).
    std::fprintf(stderr, "lpdiag.Monitor: cannot create the trace: %s; training goes on without a trace\n", e.what());
    no_trace_ = true;
    trace_error_ = e.what();
  }
}

void Monitor::group_matrices() {
  std::map<std::string, std::size_t> by_key;
  for (std::size_t i = 0; i < matrices_.size(); ++i) {
    const Tracked& m = *matrices_[i];
    std::string key = std::to_string(m.spec.rows) + "x" + std::to_string(m.spec.cols) + "@" + m.rows.weight.device().str();
    auto it = by_key.find(key);
    // A second head count for one shape gets a group of its own.
    if (it != by_key.end() && m.spec.n_heads > 0 && groups_[it->second]->n_heads > 0 && groups_[it->second]->n_heads != m.spec.n_heads) {
      key += "/" + std::to_string(m.spec.n_heads);
      it = by_key.find(key);
    }
    if (it == by_key.end()) {
      it = by_key.emplace(key, groups_.size()).first;
      groups_.push_back(std::make_unique<MatrixGroup>());
    }
    MatrixGroup& g = *groups_[it->second];
    if (m.spec.n_heads > 0) ++g.headed, g.n_heads = m.spec.n_heads;
    g.members.push_back({i, &m.rows});
  }
  // Matrices with heads first (stable): their per-head norms then read a leading slice.
  for (auto& g : groups_)
    std::stable_partition(g->members.begin(), g->members.end(),
                          [&](const MatrixGroup::Member& x) { return matrices_[x.index]->spec.n_heads > 0; });
}

void Monitor::weight_stats(MatrixGroup& g, const torch::Tensor& w, TraceRecord& r, RecordFetch& f) {
  g.whole.run(w, 1);  // a weight moves ~1e-3 of itself per step: one iteration keeps up
  const torch::Tensor fro = w.norm(2, {1, 2});
  std::vector<double*> sn, fr, sr, hs;
  for (const auto& m : g.members) {
    WeightStats& s = r.weights[m.index];
    sn.push_back(&s.spectral_norm), fr.push_back(&s.frobenius_norm), sr.push_back(&s.stable_rank);
  }
  f.add(g.whole.sigma, sn);
  f.add(fro, fr);
  f.add(fro * fro / (g.whole.sigma * g.whole.sigma), sr);  // NaN for a zero matrix
  if (g.headed > 0) {
    for (int64_t x = 0; x < g.headed; ++x)
      for (auto& h : r.weights[g.members[static_cast<std::size_t>(x)].index].head_spectral_norm) hs.push_back(&h);
    // (headed * heads, rows / heads, cols): a view of the stack's leading matrices.
    g.heads.run(w.narrow(0, 0, g.headed).reshape({-1, w.size(1) / g.n_heads, w.size(2)}), 1);
    f.add(g.heads.sigma, hs);
  }
}

void Monitor::update_stats(MatrixGroup& g, const torch::Tensor& w, TraceRecord& r, RecordFetch& f) {
  const torch::Tensor prev = g.previous();
  if (prev.defined()) {
    const torch::Tensor d = w - prev;
    const torch::Tensor fro = d.norm(2, {1, 2}), fro2 = fro * fro;  // one pass over d
    g.delta.run(d, 2);  // an update turns more from one record to the next
    const torch::Tensor sigma = g.delta.sigma;
    std::vector<double*> s1, conc, sim;
    for (const auto& m : g.members) {
      UpdateStats& u = r.updates[m.index];
      s1.push_back(&u.sigma1), conc.push_back(&u.concentration), sim.push_back(&u.similarity_prev);
    }
    f.add(sigma, s1);                      // 0 for no update
    f.add(sigma * sigma / fro2, conc);     // NaN for no update
    const torch::Tensor du = g.delta.u.squeeze(2), dv = g.delta.v.squeeze(2);
    if (g.prev_u.defined()) {
      f.add((du * g.prev_u).sum(1).abs() * (dv * g.prev_v).sum(1).abs(), sim);
      g.prev_u.copy_(du), g.prev_v.copy_(dv);  // in place: a graph's next replay reads them
    } else {
      g.prev_u = du.clone(), g.prev_v = dv.clone();
    }
  }
}  // record() then keeps this record's stack as the previous W

Monitor::StatsGraph& Monitor::stats_graph(bool weights, bool updates) {
  // Which stack buffer a record writes is part of what a graph captured.
  int64_t key = (weights ? 1 : 0) + (updates ? 2 : 0);
  for (std::size_t i = 0; i < groups_.size(); ++i) key |= int64_t(groups_[i]->target()) << (2 + i);
  auto& slot = graphs_[key];
  if (slot) return *slot;
  slot = std::make_unique<StatsGraph>();
  StatsGraph& gr = *slot;
  gr.tmpl = std::make_unique<TraceRecord>(TraceRecord::unmeasured(layout_, 0));
  gr.stack = stream_->capture([&] {
    for (auto& g : groups_) g->stack();
  });
  RecordFetch f;
  gr.stats = stream_->capture([&] {
    for (auto& g : groups_) {
      const torch::Tensor w = g->stacked();
      if (weights) weight_stats(*g, w, *gr.tmpl, f);
      if (updates) update_stats(*g, w, *gr.tmpl, f);
    }
    gr.out = torch::cat(f.values).to(torch::kFloat64);
  });
  gr.dst = f.dst;
  return gr;
}

bool Monitor::record(int64_t step, double loss, double lr, double grad_norm) {
  return record(step, torch::scalar_tensor(loss, torch::kFloat64), lr, torch::scalar_tensor(grad_norm, torch::kFloat64));
}

void Monitor::start() {
  // Each layer's numerics as the op reported them (it ran before this first record); a layer the
  // op has not run is recorded as external (attention lpdiag did not run), unless it was declared.
  std::vector<TraceEvent> contradicted;
  for (std::size_t l = 0; l < layout_.attention.size(); ++l) {
    auto& a = layout_.attention[l];
    CounterSink::Spec s;
    if (CounterSink::instance().reported_spec(session_base_ + a.layer_index, s)) {
      // A declaration the op contradicts: the trace records what ran, and says so.
      if (declared_.count(a.layer_index) && (s.policy != a.policy || s.fix_json != a.fix)) {
        std::fprintf(stderr, "lpdiag.Monitor: layer %lld was declared policy %s fix %s but the op ran policy %s fix %s; the trace "
                             "records what ran\n",
                     static_cast<long long>(a.layer_index), a.policy.c_str(), a.fix.c_str(), s.policy.c_str(), s.fix_json.c_str());
        contradicted.push_back({0, "declared_numerics_contradicted", static_cast<std::int32_t>(a.layer_index), -1, NAN,
                                "declared policy " + a.policy + " fix " + a.fix});
      }
      a.policy = s.policy, a.fix = s.fix_json, a.spec = recorded_spec(a.layer_index, s.json);
    } else if (!declared_.count(a.layer_index)) {
      a.policy = "external", a.fix = R"({"kind":"none"})";
    }
  }
  open_writer();
  if (no_trace_) return;
  for (auto& e : contradicted) writer_->add_event(e);
  termination::install();
  // A loop stuck after SIGTERM: when the grace has run out, keep the records since the last flush
  // (the buffered rows) and the record whose statistics are on their way from the device, if
  // they land within a few seconds (a device hung in the training stream's work never delivers
  // them; that one record is then left out rather than the process kept alive).
  last_resort_id_ = termination::add_last_resort([this] {
    std::unique_lock<std::recursive_mutex> lk(io_mutex_, std::try_to_lock);
    if (!lk.owns_lock() || !writer_) return;
    if (pending_record_ && stream_) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!stream_->ready() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (!stream_->ready()) pending_record_.reset(), pending_fetch_.reset();
    }
    try {
      finish_pending(-1);
    } catch (...) {  // whatever the device says now, the rows already buffered are written below
      pending_record_.reset(), pending_fetch_.reset();
    }
    writer_->close();
  });
  group_matrices();
  // A side stream when every matrix lives on one CUDA device; otherwise in line.
  bool one_cuda = !matrices_.empty();
  for (const auto& m : matrices_)
    one_cuda = one_cuda && m->rows.weight.is_cuda() && m->rows.weight.device() == matrices_.front()->rows.weight.device();
  if (one_cuda) stream_ = StatsStream::for_device(matrices_.front()->rows.weight.device());
  if (stream_) stream_device_ = matrices_.front()->rows.weight.device();
}

void Monitor::add_attention(TraceRecord& r, const CountersByLayer& counters, int64_t next_step) {
  for (const auto& [id, heads] : counters) {  // counters of this session's ids that no registered layer has
    const int64_t local = id - session_base_;
    bool known = false;
    for (const auto& a : layout_.attention) known = known || (a.layer_index == local && static_cast<int64_t>(heads.size()) == n_head_);
    if (!known && warned_layers_.insert(id).second) {
      std::fprintf(stderr, "lpdiag.Monitor: attention counters arrived for layer %lld (%zu heads), which this Monitor does not "
                           "have (%lld layers of %lld heads); they are not recorded. A wrong n_head, or q, k, v passed as "
                           "(B, N, H, d) where (B, H, N, d) is expected? `lpdiag analyze` will say so too\n",
                   static_cast<long long>(local), heads.size(), static_cast<long long>(layout_.attention.size()),
                   static_cast<long long>(n_head_));
      writer_->add_event({r.step, "unregistered_layer", static_cast<std::int32_t>(local), -1, NAN,
                          "attention counters of a layer the Monitor does not have"});
    }
  }
  for (std::size_t l = 0; l < layout_.attention.size(); ++l) {
    auto it = counters.find(session_base_ + layout_.attention[l].layer_index);
    if (it == counters.end() || static_cast<int64_t>(it->second.size()) != n_head_) continue;
    for (std::size_t h = 0; h < it->second.size(); ++h) {
      HeadCounters c = it->second[h];
      if (c.o_err_count <= 0) c.o_err_count = c.o_err_pos = c.o_err_neg = -1, c.o_err_sum = c.o_err_sumsq = NAN;
      if (c.delta_err_count <= 0) c.delta_err_count = c.delta_err_pos = c.delta_err_neg = -1, c.delta_err_sum = c.delta_err_sumsq = NAN;
      // The observer sees a kernel from outside: tile ties, P-bar == 1 entries and fix engagement
      // are the kernel's insides, unmeasured here.
      if (observed_.count(layout_.attention[l].layer_index)) c.tile_repeated_max_rows = c.pbar_one_entries = c.fix_engaged_rows = -1;
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
  std::lock_guard<std::recursive_mutex> io(io_mutex_);
  if (const int sig = termination::pending(); sig != 0 && writer_) {
    // SIGTERM / SIGINT arrived since the last record: keep everything recorded, then end as the
    // signal would have.
    termination::claim();
    close();
    termination::reraise(sig);
  }
  if (!writer_ && !no_trace_) start();
  // A step recorded again (a gradient-accumulation loop calling record() per micro-batch): the
  // trace keeps the first record of each step, and training goes on; said once, and as an event.
  if (records_ > 0 && step <= last_step_) {
    if (!warned_step_order_) {
      warned_step_order_ = true;
      std::fprintf(stderr, "lpdiag.Monitor: step %lld recorded after step %lld; records whose step does not increase are skipped "
                           "(call record() once per optimizer step); training goes on\n",
                   static_cast<long long>(step), static_cast<long long>(last_step_));
      if (writer_) writer_->add_event({last_step_, "step_not_increasing", -1, -1, static_cast<double>(step),
                                       "record() called with a step (value) that does not increase; skipped"});
    }
    return true;
  }
  last_step_ = step;
  CaptureBoard::instance().set_step(session_base_, step + 1);  // the next forward belongs to the next step
  if (no_trace_) {
    ++records_;
    return !(stop_on_nan_ && !std::isfinite(loss.item<double>()));
  }
  using clock = std::chrono::steady_clock;
  auto t_mark = clock::now();
  // The first records set things up (the trace, graph captures, the power iterations' first
  // convergence): the split counts the steady state after them.
  const bool timed = records_ >= kUntimedRecords;
  auto lap = [&](int part) {
    const auto now = clock::now();
    if (timed) host_ms_[part] += std::chrono::duration<double, std::milli>(now - t_mark).count();
    t_mark = now;
  };
  finish_pending(step + 1);  // the previous step's statistics have long landed
  lap(0);
  auto r = std::make_unique<TraceRecord>(TraceRecord::unmeasured(layout_, step));
  auto fetch = std::make_unique<RecordFetch>();
  // The loss and gradient norm of a CUDA run come with the statistics, so record() never waits
  // for the device; with stop_on_nan the loss is read now (a wait) to stop at this very step.
  auto scalar = [&](const torch::Tensor& t, double* dst, bool now) {
    if (now || !stream_ || t.device() != *stream_device_) {  // CPU, or another device: read now
      *dst = t.item<double>();
    } else {
      stream_->keep(t);  // made on the training stream, read on the side stream
      fetch->add(t, dst);
    }
  };
  scalar(loss, &r->scalars[0], stop_on_nan_);
  r->scalars[1] = lr;
  scalar(grad_norm, &r->scalars[2], false);
  auto due = [&](const char* s) { return step % cadence_[s] == 0; };
  // A layer whose numerics changed since the trace recorded them (the op's latest report).
  for (auto& a : layout_.attention) {
    CounterSink::Spec s;
    if (CounterSink::instance().reported_spec(session_base_ + a.layer_index, s) && (s.policy != a.policy || s.fix_json != a.fix)) {
      writer_->add_event({step, "attention_spec", static_cast<std::int32_t>(a.layer_index), -1, NAN,
                          "policy " + s.policy + " fix " + s.fix_json});
      a.policy = s.policy, a.fix = s.fix_json;  // reported once per change
      recorded_spec(a.layer_index, s.json);
    }
  }
  lap(1);
  // This Monitor's session only, drained every step (kept when due); counters no live Monitor
  // holds are reported once each, not kept.
  fetch->counters = PendingCounters::take(stream_ ? &*stream_device_ : nullptr, session_base_, session_base_ + kSessionLayers);
  for (const std::int64_t orphan : CounterSink::instance().drain_orphans())
    if (warned_layers_.insert(orphan).second) {
      std::fprintf(stderr, "lpdiag.Monitor: attention counters arrived for layer id %lld, which no running Monitor holds; "
                           "they are not recorded (pass the layer the Monitor numbered, or run the model inside its Monitor)\n",
                   static_cast<long long>(orphan));
      writer_->add_event({step, "unregistered_layer", -1, -1, static_cast<double>(orphan),
                          "attention counters of a layer id (value) no Monitor holds"});
    }
  for (const auto& [id, why] : CounterSink::instance().drain_skips(session_base_, session_base_ + kSessionLayers))
    writer_->add_event({step, "observe_skipped", static_cast<std::int32_t>(id - session_base_), -1, NAN, why});
  fetch->counters_due = due("attention");
  lap(2);
  const bool wd = due("weights"), ud = due("updates"), stats = wd || ud;
  StatsGraph* graph = nullptr;
  if (stats) {
    bool moved = false;
    for (auto& g : groups_) moved = g->refresh_views() || moved;
    if (moved) graphs_.clear();  // they read the old addresses
    bool steady = stream_ != nullptr;
    for (auto& g : groups_) steady = steady && g->steady(wd, ud);
    if (steady && use_graphs_) {
      try {
        graph = &stats_graph(wd, ud);
      } catch (const std::exception& e) {  // nothing captured ran: the state is as it was
        use_graphs_ = false;
        graphs_.clear();
        TORCH_WARN("lpdiag.Monitor: capturing the statistics in a CUDA graph failed (", e.what(),
                   "); they run without graphs from now on");
      }
    }
    // The copies are taken on the training stream, so the next optimizer step cannot race them.
    if (graph) graph->stack->replay();
    else
      for (auto& g : groups_) g->stack();
  }
  {
    const auto side = stream_ ? stream_->enter() : nullptr;
    if (graph) {
      graph->stats->replay();
      fetch->add(graph->out, graph->dst);
      fetch->from_template = graph->tmpl.get(), fetch->template_weights = wd, fetch->template_updates = ud;
    } else if (stats) {
      for (auto& g : groups_) {
        const torch::Tensor w = g->stacked();
        if (wd) weight_stats(*g, w, *r, *fetch);
        if (ud) update_stats(*g, w, *r, *fetch);
      }
    }
    if (due("activations"))
      for (std::size_t i = 0; i < activation_names_.size(); ++i) {
        auto it = activation_values_.find(activation_names_[i]);
        if (it == activation_values_.end()) continue;
        const ActivationNorms& a = it->second;
        if (stream_) stream_->keep(a.max_abs), stream_->keep(a.norm2);
        fetch->add(a.max_abs, std::vector<float*>{&r->activations[i].max_abs});
        fetch->add(a.norm2, std::vector<RecordFetch::Dst>{{nullptr, &r->activations[i].rms, a.rms_per_norm2}});
      }
    if (stream_) {
      if (fetch->counters.device_bytes.defined()) stream_->keep(fetch->counters.device_bytes);
      stream_->fetch(fetch->parts());
    }
  }
  lap(3);
  if (ud)
    for (auto& g : groups_) g->keep_as_previous();
  activation_values_.clear();
  for (const auto& p : CaptureBoard::instance().drain_done(session_base_)) writer_->add_event({step, "capture_written", -1, -1, NAN, p});
  const bool stop = stop_on_nan_ && !std::isfinite(r->scalars[0]);
  pending_record_ = std::move(r);
  pending_fetch_ = std::move(fetch);
  ++records_;
  if (!stream_ || stop) finish_pending(step + 1);  // in line, or a run that stops here
  lap(4);
  if (timed) ++timed_records_;
  if (stop) {
    writer_->sync();  // the run stops here: everything on disk before record() says so
    return false;
  }
  return true;
}

std::string Monitor::host_cost_json() const {
  const double n = timed_records_ > 0 ? static_cast<double>(timed_records_) : 1.0;
  const char* names[5] = {"land", "prepare", "counters", "stats", "rest"};
  nlohmann::json j;
  double total = 0;
  for (int i = 0; i < 5; ++i) j[names[i]] = host_ms_[i] / n, total += host_ms_[i];
  j["total"] = total / n;
  j["records"] = timed_records_;
  return j.dump();
}

void Monitor::finish_pending(int64_t next_step) {
  if (!pending_record_) return;
  TraceRecord& r = *pending_record_;
  RecordFetch& f = *pending_fetch_;
  const CountersByLayer counters = stream_ && f.parts_count() > 0 ? f.land(stream_->wait()) : f.land_in_line();
  if (f.from_template && f.template_weights) r.weights = f.from_template->weights;
  if (f.from_template && f.template_updates) r.updates = f.from_template->updates;
  if (f.counters_due) add_attention(r, counters, next_step);
  if (!std::isfinite(r.scalars[0])) writer_->add_event({r.step, "nan_inf", -1, -1, r.scalars[0], "loss is not finite"});
  writer_->append(r);
  run_alarm(r);
  pending_record_.reset();
  pending_fetch_.reset();
}

void Monitor::set_alarm(bool on) {
  if (!on) {
    detector_.reset();
  } else if (!detector_) {
    detector_ = std::make_unique<alarm::AlarmDetector>();
    alarm_thresholds_ = "default";
  }
}

void Monitor::set_alarm_thresholds(const std::string& name) {
  TORCH_CHECK(!writer_, "lpdiag.Monitor: set_alarm_thresholds after the first record(); choose the thresholds before training");
  const auto p = alarm::AlarmParams::preset(name);
  TORCH_CHECK(p.has_value(), "lpdiag.Monitor: unknown alarm thresholds '", name, "'; use one of: ", alarm::alarm_preset_list());
  detector_ = std::make_unique<alarm::AlarmDetector>(*p);
  alarm_thresholds_ = name;
}

void Monitor::set_on_alarm(std::function<void(const alarm::Alarm&)> hook) { on_alarm_ = std::move(hook); }

void Monitor::set_guard(std::string guard) {
  TORCH_CHECK(!writer_, "lpdiag.Monitor: set_guard after the first record(); choose the guard before training");
  if (!guard.empty()) {
    try {
      check_guard_name(guard);
    } catch (const std::invalid_argument& e) {
      TORCH_CHECK(false, "lpdiag.Monitor: ", e.what());
    }
    TORCH_CHECK(detector_, "lpdiag.Monitor: a guard acts on alarms; it needs the alarm on");
  }
  guard_ = std::move(guard);
}

std::string Monitor::alarms_json() const {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [a, guarded] : alarms_)
    j.push_back({{"step", a.step}, {"kind", a.kind}, {"layer_index", a.layer_index >= 0 ? nlohmann::json(a.layer_index) : nlohmann::json()},
                 {"head", a.head >= 0 ? nlohmann::json(a.head) : nlohmann::json()}, {"evidence", a.evidence}, {"guarded", guarded}});
  return j.dump();
}

std::string Monitor::readings_json() const {
  return detector_ ? alarm::readings_json(detector_->readings()).dump() : "null";
}

std::vector<int64_t> Monitor::guarded_layers() const {
  std::vector<int64_t> out;
  for (const auto& [a, guarded] : alarms_)
    if (guarded) out.push_back(session_base_ + a.layer_index);
  for (int64_t l : manual_guards_) out.push_back(session_base_ + l);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void Monitor::guard_layer(int64_t layer, std::string guard) {
  TORCH_CHECK(layer >= 0 && layer < n_layer_, "lpdiag.Monitor.guard_layer: layer must be in [0, ", n_layer_, "), got ", layer);
  try {
    check_guard_name(guard);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "lpdiag.Monitor.guard_layer: ", e.what());
  }
  std::lock_guard<std::recursive_mutex> io(io_mutex_);
  GuardBoard::instance().set(session_base_ + layer, guard);
  manual_guards_.push_back(layer);
  if (writer_)
    writer_->add_event({last_step_, "guard_switch", static_cast<std::int32_t>(layer), -1, NAN,
                        guard + ": by guard_layer(); layer " + std::to_string(layer) + " switched from the next step"});
}

// The alarm on one appended record. Whatever happens here never stops training: a guard that cannot
// switch a layer says so and leaves it as it was.
void Monitor::run_alarm(const TraceRecord& r) {
  if (!detector_) return;
  for (const auto& a : detector_->feed(alarm::alarm_record(layout_, r))) {
    bool guarded = false;
    std::string note;
    const auto already = guarded_layers();
    if (!guard_.empty() && a.layer_index >= 0 &&
        std::binary_search(already.begin(), already.end(), session_base_ + a.layer_index)) {
      // A layer raises each kind once, so a switched layer can alarm again: it stays as it is.
      guarded = true;
      note = "; layer " + std::to_string(a.layer_index) + " already runs under the guard";
    } else if (!guard_.empty() && a.layer_index >= 0) {
      CounterSink::Spec s;
      const int64_t id = session_base_ + a.layer_index;
      try {
        // A spec the guard cannot run under is refused here, not in the next forward.
        if (CounterSink::instance().reported_spec(id, s) && s.policy.rfind("external", 0) != 0) guarded_spec(s.json, guard_);
        GuardBoard::instance().set(id, guard_);
        guarded = true;
        note = "; layer " + std::to_string(a.layer_index) + " switched to " + guard_ + " attention from the next step";
      } catch (const std::exception& e) {
        note = "; the guard could not switch layer " + std::to_string(a.layer_index) + ": " + e.what();
      }
      writer_->add_event({r.step, guarded ? "guard_switch" : "guard_failed", static_cast<std::int32_t>(a.layer_index),
                          static_cast<std::int32_t>(a.head), NAN, guard_ + ": " + a.kind + note});
    }
    writer_->add_event({r.step, "alarm", static_cast<std::int32_t>(a.layer_index), static_cast<std::int32_t>(a.head), NAN,
                        a.kind + ": " + a.evidence});
    std::fprintf(stderr, "lpdiag.Monitor: ALARM at step %lld: %s: %s%s\n", static_cast<long long>(a.step), a.kind.c_str(),
                 a.evidence.c_str(), note.c_str());
    alarms_.emplace_back(a, guarded);
    if (on_alarm_) {
      try {
        on_alarm_(a);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "lpdiag.Monitor: the on_alarm hook threw (%s); training goes on\n", e.what());
      }
    }
  }
}

void Monitor::close() {
  std::lock_guard<std::recursive_mutex> io(io_mutex_);
  if (session_base_ >= 0 && !session_released_) {
    GuardBoard::instance().clear_range(session_base_, session_base_ + kSessionLayers);
    CaptureBoard::instance().forget(session_base_);
    release_session(session_base_), session_released_ = true;
  }
  if (!writer_) return;
  finish_pending(-1);  // no step follows: a capture would never be written
  writer_->close();
}

}  // namespace lpdiag::hooks
