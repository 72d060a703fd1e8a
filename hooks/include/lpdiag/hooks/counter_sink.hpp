// Where every call of the attention op leaves its per-head counters until the Monitor records
// them. Process-wide and thread-safe; keyed by the layer index the op was given. Each live
// Monitor owns one session: the layer ids [base, base + kSessionLayers), base a multiple of
// kSessionLayers (the first Monitor alive gets 0, so a lone Monitor's ids are its layer numbers),
// and drains only those: two Monitors in one process (two models) never mix their counters.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "lpdiag/trace/head_counters.hpp"

namespace lpdiag::hooks {

constexpr std::int64_t kSessionLayers = std::int64_t(1) << 20;

// The lowest free session base (0, kSessionLayers, ...), taken until released.
std::int64_t acquire_session();
void release_session(std::int64_t base);
// Whether `layer` lies in a session some live Monitor holds.
bool layer_has_session(std::int64_t layer);

class CounterSink {
 public:
  static CounterSink& instance();
  void add(std::int64_t layer, const std::vector<HeadCounters>& heads);
  // Only what calls on the CPU added for layer ids in [lo, hi).
  std::map<std::int64_t, std::vector<HeadCounters>> drain_host(std::int64_t lo, std::int64_t hi);
  // Removes and returns the ids no live session holds (their counters have no Monitor to go to).
  std::vector<std::int64_t> drain_orphans();
  // What ran for a layer, as the op (or the observer) reported it in the spec's one serialized
  // form (AttentionSpec::to_json: policy, fix with its parameters, level, causal, scale; an
  // observed kernel's: policy "external:<name>" and "observed"); policy and fix_json are read
  // from it once, for the trace's per-layer attributes.
  struct Spec {
    std::string policy, fix_json, json;
  };
  void report_spec(std::int64_t layer, const std::string& json);
  bool reported_spec(std::int64_t layer, Spec& out);
  // Calls of `layer` the observer skipped: the first of each reason, kept for the layer's Monitor
  // (an observe_skipped event); drain_skips takes those of ids in [lo, hi).
  void report_skip(std::int64_t layer, const std::string& reason);
  std::vector<std::pair<std::int64_t, std::string>> drain_skips(std::int64_t lo, std::int64_t hi);
  // Forgets the counters and specs of ids in [lo, hi) (a session taken anew: a previous Monitor's
  // leftovers are not the new one's).
  void clear_range(std::int64_t lo, std::int64_t hi);
  // Returns and clears what arrived since the last drain, from the CPU and (copied now, which
  // waits for the device) from CUDA.
  std::map<std::int64_t, std::vector<HeadCounters>> drain();
  // Only what calls on the CPU added (the Monitor takes the device counters without waiting).
  std::map<std::int64_t, std::vector<HeadCounters>> drain_host();

 private:
  std::mutex mu_;
  std::map<std::int64_t, std::vector<HeadCounters>> pending_;
  std::map<std::int64_t, Spec> specs_;
  std::vector<std::pair<std::int64_t, std::string>> skips_;
};

// Capture requests: the op saves q, k, v of a requested layer in forward and writes the capture
// (with dO) in backward.
struct CaptureRequest {
  std::int64_t layer = -1;
  std::int64_t step = -1;
  std::string path;
};
class CaptureBoard {
 public:
  static CaptureBoard& instance();
  void request(const CaptureRequest& r);
  // The request for `layer` if it is due at its session's current step (removed then); a request
  // for a step already past is dropped with one line on stderr. With the step unknown (-1), every
  // request is due.
  bool take(std::int64_t layer, CaptureRequest& out);
  // The step whose forward runs next in `session` (a Monitor's layer_base(); it sets it after each
  // record; -1: unknown). Each Monitor's session has its own step and its own finished captures:
  // two Monitors in one process never see each other's.
  void set_step(std::int64_t session, std::int64_t step);
  void done(std::int64_t layer, const std::string& path);
  std::vector<std::string> drain_done(std::int64_t session);
  void forget(std::int64_t session);  // a Monitor that ends: its step and finished captures go

 private:
  std::mutex mu_;
  std::map<std::int64_t, CaptureRequest> pending_;
  std::map<std::int64_t, std::vector<std::string>> done_;  // by session
  std::map<std::int64_t, std::int64_t> step_;              // by session
};

}  // namespace lpdiag::hooks
