// The numerics an attention run declares: policy (docs/design.md "Kernel numerics policies"), the
// stabilized-shift fix, tile sizes. docs/reference/attention-numerics.md gives every policy's exact order
// of operations.
#pragma once
#include <cstdint>
#include <string>

#include "lpdiag/numerics/float_format.hpp"

namespace lpdiag {

// fa2: lpdiag's CUDA kernels, operation for operation, with the tensor cores' accumulation
// (numerics/mma_model.hpp) and the MUFU exp's input rounding; fa2-seq: the same algorithm with
// every product added one at a time in fp32 (the emulation before the MMA model). seed: the
// paper's all-bf16 order with every dot product summed one feature at a time in fp32; seed-mma:
// the same order and roundings with the matrix products on the tensor cores (MMA model), as the
// paper's code runs on a GPU, where its bf16 matmuls are tensor-core GEMMs.
enum class Policy { fa2, fa2_sequential, seed, fp32, fp8_p, seed_mma };

const char* policy_name(Policy p);
Policy parse_policy(const std::string& name);  // "fa2", "fa2-seq", "seed", "seed-mma", "fp32", "fp8-p" (or "fp8-p:e5m2")

struct FixConfig {
  // sr: no shift; O is rounded to bf16 stochastically (numerics/stochastic_bf16.hpp) instead of
  // to nearest, so its rounding error has mean zero whatever the accumulation did to the ties.
  enum class Kind { none, paper, safe, sr };
  Kind kind = Kind::none;
  // paper: a tile row whose max occurs >= 2 times within tol is shifted by m = beta * max when
  // max > 0 and m = 0 when max < 0 (max == 0 is left alone, as in the authors' code).
  double tol = 1e-3;
  double beta = 2.0;
  // safe: any repeated tile max (including 0) is shifted by m = max + offset, so the max entries
  // get exp(-offset) instead of exactly 1, never underflowing. The default ln(4/3) makes that
  // 0.75: not a power of two, yet exact in bf16, so fa2's bf16(P-bar) for the MMA does not
  // differ from the fp32 P-bar in the row sum (any other constant adds its own one-signed bias).
  double offset = 0.28768207245178093;
  // sr: the seed of the counter-based random bits (element index = ((b H + h) N + i) d + c).
  std::uint32_t seed = 0;

  std::string name() const;  // "none", "paper", "safe", "sr"
  bool shifts() const { return kind == Kind::paper || kind == Kind::safe; }
  std::string to_json() const;
};

// "none", "paper", "safe", "sr", "paper:beta=7,tol=1e-3", "safe:offset=0.5,tol=0", "sr:seed=7",
// or the JSON to_json writes ({"kind":"paper","beta":7,"tol":0.001}): the same config back.
FixConfig parse_fix(const std::string& text);

struct AttentionConfig {
  Policy policy = Policy::fa2;
  FixConfig fix;
  FormatId fp8_format = FormatId::e4m3;  // fp8-p only
  int tile_q = 64;   // query rows per tile: affects speed only (rows are independent)
  int tile_k = 64;   // keys per tile: the online-softmax rescaling points, so it changes numerics
  bool causal = false;
  double scale = 0.0;  // alpha; 0 means 1/sqrt(d)
};

// A policy as written on a command line or in the op's arguments: a policy name, "fp8-p:e5m2",
// or "NAME:tile=K" for the key tile (e.g. "seed:tile=512", the paper's training tile).
// Sets policy, fp8_format and tile_k of a default config; throws InvalidArgument.
AttentionConfig parse_policy_spec(const std::string& text);

}  // namespace lpdiag
