// One typed attention spec: the numerics (policy, fp8 format, key tile, fix and its parameters,
// causal, scale) and the instrumentation level, parsed from its text forms in one place and
// written back in one place. The op, the CPU engine, the CUDA entries, the CLI and the trace use
// it; the level enum is the one the CPU and the CUDA kernels share.
#pragma once
#include <string>

#include "lpdiag/attention/attention_config.hpp"

namespace lpdiag {

// off: plain attention; counters: the repeated-max counters and logits; full: also the fp32 /
// fp64 path that measures O and delta errors. Values are the kernels' (0, 1, 2).
enum class Level { off = 0, counters = 1, full = 2 };

const char* level_name(Level l);                // "off", "counters", "full"
Level parse_level(const std::string& name);     // throws InvalidArgument naming the choices

// The policy as text that parse_policy_spec reads back to the same config: "fa2", "fp8-p:e5m2",
// "seed:tile=128" (the tile only when it is not the default 64).
std::string policy_spec_name(const AttentionConfig& c);

struct AttentionSpec {
  AttentionConfig config;
  Level level = Level::counters;

  std::string policy() const { return policy_spec_name(config); }
  std::string fix_json() const { return config.fix.to_json(); }
  // {"policy": "...", "fix": {...}, "level": "...", "causal": bool, "scale": x (0: 1/sqrt(d))}
  std::string to_json() const;
};

// From the op's and the CLI's text forms: policy as parse_policy_spec reads it, fix as
// parse_fix reads it (text or its JSON), level as parse_level. Throws InvalidArgument.
AttentionSpec parse_attention_spec(const std::string& policy, const std::string& fix, const std::string& level, bool causal,
                                   double scale = 0.0);
// The inverse of AttentionSpec::to_json.
AttentionSpec attention_spec_from_json(const std::string& json);

}  // namespace lpdiag
