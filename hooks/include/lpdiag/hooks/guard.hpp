// The guard's switchboard: per op layer id, the numerics an alarm switched that layer to. The
// Monitor sets an entry when the online alarm names a layer (Monitor(guard=...)); every later
// call of lpdiag's attention op for that layer runs under the guard's spec, forward and backward
// alike. Process-wide and thread-safe; a lookup while no layer is guarded is one atomic load.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace lpdiag::hooks {

// The guards a Monitor accepts: "fp32" (fp32 attention), "sr" (stochastic rounding of O),
// "paper" (the paper's fix). Throws std::invalid_argument for anything else.
void check_guard_name(const std::string& guard);

// `spec_json` (AttentionSpec's JSON) with the guard's numerics: fp32 replaces the policy (fix
// none), sr and paper replace the fix. Level, causality and scale are kept. Throws
// lpdiag::InvalidArgument where the result is not a spec the kernels run.
std::string guarded_spec(const std::string& spec_json, const std::string& guard);

class GuardBoard {
 public:
  static GuardBoard& instance();
  void set(std::int64_t layer, const std::string& guard);
  // The spec a call of `layer` runs under: `spec_json` itself unless the layer is guarded.
  std::string resolve(std::int64_t layer, const std::string& spec_json);
  void clear_range(std::int64_t lo, std::int64_t hi);  // a Monitor's session that ends

 private:
  std::mutex mu_;
  std::map<std::int64_t, std::string> guards_;
  std::atomic<bool> any_{false};
};

}  // namespace lpdiag::hooks
