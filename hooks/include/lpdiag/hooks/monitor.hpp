// lpdiag::Monitor: records a training run into a trace (docs/reference/trace-format.md). One class for C++ and
// Python (torch.classes.lpdiag.Monitor after torch.ops.load_library). The training loop calls
// record() once per step; everything else happens at each signal's cadence.
#pragma once
#include <torch/custom_class.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <functional>

#include "lpdiag/alarm/alarm_detector.hpp"
#include "lpdiag/trace/trace_writer.hpp"

namespace lpdiag::hooks {

// The Monitor's private parts (hooks/src): declared only.
struct MatrixGroup;
struct RecordFetch;
class StatsStream;

class Monitor : public torch::CustomClassHolder {
 public:
  // Fails here, not mid-run, when `path` cannot be written. world_size > 1 writes
  // NAME.rank<k>.h5.
  Monitor(std::string path, int64_t n_layer, int64_t n_head, int64_t head_dim, std::string run_config, int64_t rank,
          int64_t world_size, bool overwrite = false);
  ~Monitor() override;

  // Role map: rows [row0, row1) of `weight` (2-D, out x in, as nn.Linear stores it) are matrix
  // `name` with `role` of layer `layer`; n_heads > 0 slices it per head (attn_q, attn_k).
  void add_matrix(std::string name, std::string role, int64_t layer, int64_t n_heads, torch::Tensor weight, int64_t row0,
                  int64_t row1);
  // GPT-2's fused c_attn (3C x C): registers q, k, v of `layer` from one weight.
  void add_fused_qkv(std::string prefix, int64_t layer, torch::Tensor weight);
  void add_activation(std::string name, int64_t layer);
  void observe_activation(std::string name, torch::Tensor x);
  // signal: "weights", "updates", "attention", "activations"; every: record it every N steps.
  // Defaults: weights and updates every 10 steps (every step costs a GPT-2-small step 0.5 ms more
  // on an H100, docs/results/performance.md), attention and activations every step.
  void set_cadence(std::string signal, int64_t every);
  void set_flush_every(int64_t records);
  // Deflate level 0 (none, the default) to 9 for the trace's datasets, applied as chunks are written.
  void set_compression(int64_t level);
  void set_stop_on_nan(bool stop);
  // On CUDA the weight and update statistics are captured in CUDA graphs once their state is
  // steady (third record) and replayed: two launches per record instead of ~60 per matrix shape.
  // A parameter moved to new storage is noticed and recaptured. Off: launched one by one.
  void set_cuda_graphs(bool on);
  // What ran in attention layer `layer` (docs/reference/trace-format.md: never a default): policy ("fa2",
  // "seed", ..., or "external:<backend>" when PyTorch's own attention ran) and fix ("none",
  // "paper", "safe:offset=0.5", ...). Before the first record.
  void set_attention_numerics(int64_t layer, std::string policy, std::string fix);
  // Write a capture of layer `layer` at the next step whose rate of repeated-max rows exceeds
  // `rate` (at most `max_captures` captures).
  void set_capture_trigger(double rate, int64_t max_captures);
  void request_capture(int64_t layer, int64_t step);
  // A resumed run: its first record will be step `step`, so its first forward is that step and
  // request_capture(layer, step) can name it. Before the first record (afterwards each record
  // says which step comes next).
  void set_start_step(int64_t step);
  // The cadence at which the attention of this run is observed (lpdiag.observed, observe_sdpa,
  // observe_call): layers the observer reported carry it in their spec (`observe_every`).
  void set_observe_every(int64_t every);

  // Records step `step`. Returns false when training should stop (non-finite loss and
  // stop_on_nan). With weights on CUDA the statistics run on a side stream and the record is
  // appended at the next record() or close(); a crash loses at most that one record.
  // loss and grad_norm may stay on the device (scalar tensors): then record() never waits for
  // the device, and a non-finite loss is seen when the record lands (its event keeps the step).
  // With stop_on_nan the loss is read at once, which waits, so the run stops at that step.
  // A capture trigger fires at the first step whose forward has not run when the counters land.
  bool record(int64_t step, const torch::Tensor& loss, double lr, const torch::Tensor& grad_norm);
  bool record(int64_t step, double loss, double lr, double grad_norm);
  void close();
  // The trace being written: "" when there is none (it could not be created, e.g. a full disk;
  // trace_error() says why). Training goes on either way.
  std::string trace_path() const { return no_trace_ ? std::string() : path_; }
  std::string trace_error() const { return trace_error_; }
  // The op's layer id of this Monitor's layer 0 (its session; 0 while it is the only Monitor):
  // attention calls of layer l pass layer_base() + l.
  int64_t layer_base() const { return session_base_; }
  int64_t records() const { return records_; }
  // The host time record() took, per record on average after the first kUntimedRecords, by part
  // (JSON, milliseconds): "total";
  // "land" (the previous record's statistics landing and its append to the trace), "prepare"
  // (the new record and its scalars), "counters" (taking the attention counters), "stats" (the
  // weight, update and activation statistics launched), "rest". A number to log beside a run's
  // step time.
  std::string host_cost_json() const;
  // The online alarm (lpdiag/alarm/alarm_detector.hpp) runs on every record as it is appended (on
  // CUDA, one record later: when its statistics have landed). Each alarm is a trace event
  // ("alarm"), one line on stderr, and a call of the on_alarm hook. On by default.
  void set_alarm(bool on);
  // Which thresholds the alarm uses (alarm::AlarmParams::preset: "default", "slow-trigger", "odds-trigger"); turns
  // the alarm on. Before the first record. The trace's run_config records the choice as "alarm"
  // ("default", a name, or "off"), when run_config is a JSON object without that key.
  void set_alarm_thresholds(const std::string& name);
  void set_on_alarm(std::function<void(const alarm::Alarm&)> hook);
  // guard "fp32", "sr" or "paper" ("" none): when an alarm names a layer, that layer's later calls
  // of lpdiag's attention op run under the guard's numerics (hooks/guard.hpp), and a
  // "guard_switch" event says so. The other layers keep theirs. Before the first record.
  void set_guard(std::string guard);
  // The alarms so far, a JSON array of {step, kind, layer_index, head, evidence, guarded}.
  std::string alarms_json() const;
  int64_t alarm_count() const { return static_cast<int64_t>(alarms_.size()); }
  // What the alarm reads after the latest record it saw (lpdiag/alarm/readings_json.hpp), for the
  // user's own dashboard; "null" when the alarm is off.
  std::string readings_json() const;
  // Switches this Monitor's layer `layer` to `guard`'s numerics now, as an alarm would (a
  // "guard_switch" event), on the user's own signal.
  void guard_layer(int64_t layer, std::string guard);
  // The op's layer ids (layer_base() + l) the guard has switched.
  std::vector<int64_t> guarded_layers() const;

 private:
  static constexpr int64_t kUntimedRecords = 10;
  void run_alarm(const TraceRecord& r);
  std::unique_ptr<alarm::AlarmDetector> detector_ = std::make_unique<alarm::AlarmDetector>();
  std::string alarm_thresholds_ = "default";
  std::function<void(const alarm::Alarm&)> on_alarm_;
  std::string guard_;
  std::vector<std::pair<alarm::Alarm, bool>> alarms_;  // with whether the guard switched its layer
  std::vector<int64_t> manual_guards_;                 // layers guard_layer() switched
  int64_t session_base_ = -1;
  bool session_released_ = false;
  std::set<int64_t> warned_layers_;
  std::set<int64_t> declared_;  // layers set_attention_numerics was given
  std::set<int64_t> observed_;  // layers whose counters come from the observer
  int64_t observe_every_ = 0;
  // A layer's reported spec, as the trace records it (observed layers: with observe_every).
  std::string recorded_spec(int64_t layer_index, const std::string& json);
  struct Tracked;
  void open_writer();
  void start();  // at the first record: the writer, the groups, the side stream
  struct StatsGraph;
  void group_matrices();
  // `w`: the group's matrices stacked, (G, rows, cols), taken once per record.
  void weight_stats(MatrixGroup& g, const torch::Tensor& w, TraceRecord& r, RecordFetch& f);
  void update_stats(MatrixGroup& g, const torch::Tensor& w, TraceRecord& r, RecordFetch& f);
  // The captured statistics for this combination of due signals (captured on first use).
  StatsGraph& stats_graph(bool weights, bool updates);
  // Appends the record whose statistics are still on their way, once they have landed; a
  // capture trigger then asks for step `next_step` (none when negative).
  void finish_pending(int64_t next_step);
  void add_attention(TraceRecord& r, const std::map<std::int64_t, std::vector<HeadCounters>>& counters, int64_t next_step);

  std::string path_, stem_, run_config_;
  int64_t n_layer_, n_head_, head_dim_, rank_, world_size_;
  std::vector<std::unique_ptr<Tracked>> matrices_;
  std::vector<std::unique_ptr<MatrixGroup>> groups_;
  std::map<int64_t, std::unique_ptr<StatsGraph>> graphs_;  // by due signals and stack buffers; CUDA only
  std::vector<std::string> activation_names_;
  std::vector<int64_t> activation_layers_;
  struct ActivationNorms {
    torch::Tensor max_abs, norm2;  // device scalars, fetched by record()
    double rms_per_norm2;          // 1 / sqrt(numel)
  };
  std::map<std::string, ActivationNorms> activation_values_;
  std::map<std::string, int64_t> cadence_{{"weights", 10}, {"updates", 10}, {"attention", 1}, {"activations", 1}};
  int64_t flush_every_ = 100;
  int64_t compression_ = 0;
  bool no_trace_ = false;  // the trace could not be created: record() only counts
  bool stop_on_nan_ = false;
  bool use_graphs_ = true;
  double capture_rate_ = -1;
  int64_t captures_left_ = 0;
  int64_t records_ = 0;
  double host_ms_[5] = {0, 0, 0, 0, 0};  // land, prepare, counters, stats, rest (summed over records)
  int64_t timed_records_ = 0;
  int64_t last_step_ = 0;  // of the last record kept
  bool warned_step_order_ = false;
  std::string trace_error_;
  TraceLayout layout_;
  std::unique_ptr<TraceWriter> writer_;
  // Held by record() and close(); the termination watchdog closes the trace only when it can take
  // it (the training thread is not inside the writer).
  std::recursive_mutex io_mutex_;
  int last_resort_id_ = 0;  // the watchdog's registration, 0 when none
  std::unique_ptr<StatsStream> stream_;          // CUDA weights: statistics beside training
  std::optional<torch::Device> stream_device_;   // its device: counters there are taken without waiting
  std::unique_ptr<TraceRecord> pending_record_;  // queued by the last record(), appended by the next
  std::unique_ptr<RecordFetch> pending_fetch_;
};

}  // namespace lpdiag::hooks
