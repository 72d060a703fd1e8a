// Attention capture files (docs/reference/trace-format.md "Capture file"): the full q, k, v, dO of one layer at
// one step, so the step can be replayed offline under other numerics.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lpdiag {

struct AttentionCapture {
  std::int64_t step = 0;
  std::int64_t layer_index = 0;
  std::string layer;                     // module name
  std::string policy = "fa2";
  std::string fix = "{}";                // JSON
  bool causal = false;
  double scale = 0.0;                    // alpha, usually 1/sqrt(d)
  std::string source_dtype = "bfloat16"; // every value is exact in this dtype
  std::int64_t B = 0, H = 0, N = 0, d = 0;
  std::vector<float> q, k, v, dout;      // [B,H,N,d] row-major
  std::vector<float> o;                  // optional, [B,H,N,d], as the kernel produced it
  std::vector<float> lse;                // optional, [B,H,N]

  std::size_t elements() const { return static_cast<std::size_t>(B * H * N * d); }
};

// NAME.capture.<step>.<layer_index>.h5 next to the trace NAME.h5 (NAME may carry .rank<k>).
std::string capture_file_name(const std::string& trace_stem, std::int64_t step, std::int64_t layer_index);

// Throws InvalidArgument for an inconsistent capture, WriteError when the file cannot be written.
void write_capture(const std::string& path, const AttentionCapture& c);
// Throws InputError naming the file and the problem: not a capture, wrong version, shapes that
// disagree, NaN/Inf, values not exact in source_dtype.
AttentionCapture read_capture(const std::string& path);

}  // namespace lpdiag
