// Where every call of the attention op leaves its per-head counters until the Monitor records
// them. Process-wide and thread-safe; keyed by layer index.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "lpdiag/trace/head_counters.hpp"

namespace lpdiag::hooks {

class CounterSink {
 public:
  static CounterSink& instance();
  void add(std::int64_t layer, const std::vector<HeadCounters>& heads);
  // Returns and clears what arrived since the last drain, from the CPU and (copied now, which
  // waits for the device) from CUDA.
  std::map<std::int64_t, std::vector<HeadCounters>> drain();
  // Only what calls on the CPU added (the Monitor takes the device counters without waiting).
  std::map<std::int64_t, std::vector<HeadCounters>> drain_host();

 private:
  std::mutex mu_;
  std::map<std::int64_t, std::vector<HeadCounters>> pending_;
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
  // The request for `layer` if it is due at the current step (removed then); a request for a step
  // already past is dropped with one line on stderr. With the step unknown (-1), every request is due.
  bool take(std::int64_t layer, CaptureRequest& out);
  // The step whose forward runs next (the Monitor sets it after each record; -1: unknown).
  void set_step(std::int64_t step);
  void done(const std::string& path);
  std::vector<std::string> drain_done();

 private:
  std::mutex mu_;
  std::map<std::int64_t, CaptureRequest> pending_;
  std::vector<std::string> done_;
  std::int64_t step_ = -1;
};

}  // namespace lpdiag::hooks
