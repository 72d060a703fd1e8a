// Adversarial input families for `lpdiag probe`, generated from fixed seeds so a CI run is
// reproducible. Every value is exact in bf16.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lpdiag {

struct ProbeCase {
  std::string family;       // e.g. "dup-keys"
  std::string description;
  bool causal = false;
  std::int64_t B = 1, H = 0, N = 0, d = 0;
  std::vector<float> q, k, v, dout;
};

// iid, sinks, dup-keys, skewed-v, large-logits, long-rows, zero-max, strong-sinks
const std::vector<std::string>& probe_family_names();
constexpr std::uint64_t kProbeSeed = 0x1DA60B3;  // the fixed seed `lpdiag probe` starts from
// head_dim: 64 for `lpdiag probe`; other values keep each family's meaning (logit gaps are set
// through 1/sqrt(d)), for tests of other kernel shapes.
ProbeCase make_probe_case(const std::string& family, bool causal, std::uint64_t seed = kProbeSeed, std::int64_t head_dim = 64);

}  // namespace lpdiag
