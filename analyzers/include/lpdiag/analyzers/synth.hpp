// Synthetic traces in format v1, for tests and demos: planted chains with random layer, head,
// onsets, magnitudes and noise, and null traces that lack a link on purpose.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace lpdiag::analysis {

// undriven: every link planted, in order and in one head, but W_Q's growth follows a wandering
// of its own, independent of the bias (a null: timing alone must not make a chain).
enum class SynthKind { chain, loss_spike, growth_no_trigger, bias_no_growth, clean, undriven };

const char* synth_kind_name(SynthKind k);
SynthKind parse_synth_kind(const std::string& name);  // chain, loss-spike, growth-no-trigger, bias-no-growth, clean, undriven

struct SynthOptions {
  SynthKind kind = SynthKind::chain;
  std::uint64_t seed = 1;
  std::int64_t records = 0;  // 0: random in [1500, 3000]
  int layers = 0, heads = 0; // 0: random (2..4 layers, 4..8 heads)
  bool irregular_stride = true;
  double gap_fraction = 0.02;  // records whose attention and weight signals are unmeasured
  int ranks = 1;               // > 1 writes NAME.rank<k>.h5 files of one run
  int flush_every = 256;       // records per flush
  int compression = 0;         // deflate level of the datasets, 0 = none
  int record_delay_us = 0;     // sleep after each record: a slow "live" run for watch demos and tests
  bool steady_bias = false;    // the bias's size does not wander: whether it drives the growth is untestable
};

struct SynthTruth {
  SynthKind kind = SynthKind::clean;
  std::int64_t layer_index = -1, head = -1;
  std::array<std::int64_t, 5> onset_step{-1, -1, -1, -1, -1};  // C1..C5, -1 where not planted
  std::int64_t first_step = 0, last_step = 0;
  std::vector<std::string> files;
};

// `path` names the trace (NAME.h5); with ranks > 1 the files are NAME.rank<k>.h5.
SynthTruth write_synth_trace(const std::string& path, const SynthOptions& opt);

}  // namespace lpdiag::analysis
