// What a trace holds, declared up front: the writer creates every group and dataset from it
// when the file opens (so it can switch to SWMR), and the reader returns it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lpdiag {

struct AttentionLayerSpec {
  std::string name;  // group name under /attention (usually the module path)
  std::int64_t layer_index = -1;
  std::int64_t n_heads = 0;
  std::int64_t head_dim = 0;
  std::string policy = "fa2";
  std::string fix = "{}";  // JSON
  // The whole spec the layer ran under, in its one serialized form (AttentionSpec::to_json:
  // policy, fix with its parameters, level, causal, scale); "" when the writer did not know it
  // (attention lpdiag did not run). Optional attribute `spec`.
  std::string spec;
};

// role: attn_q, attn_k, attn_v, attn_o, mlp_in, mlp_out, embedding, lm_head, other
struct MatrixSpec {
  std::string name;
  std::string role = "other";
  std::int64_t layer_index = -1;
  std::int64_t rows = 0, cols = 0;
  std::int64_t n_heads = 0;  // > 0 only for head-sliced attn_q / attn_k
  std::string source;        // parameter name and row range
};

struct ActivationSpec {
  std::string name;
  std::int64_t layer_index = -1;
};

struct TraceLayout {
  std::vector<std::string> scalars{"loss", "lr", "grad_norm"};
  std::vector<AttentionLayerSpec> attention;
  std::vector<MatrixSpec> matrices;
  std::vector<ActivationSpec> activations;
};

struct TraceHeader {
  std::string producer;            // default: "lpdiag <version>"
  std::string created_utc;         // default: now
  std::string run_config = "{}";   // JSON
  std::int64_t rank = 0;
  std::int64_t world_size = 1;
};

bool is_valid_role(const std::string& role);

}  // namespace lpdiag
