// libFuzzer target: arbitrary bytes as a trace or capture file, opened the way the CLI opens
// them: preflight in a child process, then the real read in this process. Any lpdiag::Error is
// a correct answer; a crash or hang here (after the preflight passed) or an uncaught exception is
// a bug. Coverage guidance comes from the in-process read of inputs that pass the preflight.
// Inputs that read also go through the analyzers' second stage as `analyze`, `check` and `watch`
// run it: binning in this process (workers = 1; the forked readers run the same code) and the
// chain reconstruction with its run verdict.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "lpdiag/analyzers/binned_trace.hpp"
#include "lpdiag/analyzers/chain.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/trace/capture.hpp"
#include "lpdiag/trace/preflight.hpp"
#include "lpdiag/trace/trace_reader.hpp"

namespace {
std::string scratch_path() {
  const char* dir = std::getenv("LPDIAG_FUZZ_DIR");
  return std::string(dir ? dir : "/tmp") + "/lpdiag-fuzz-" + std::to_string(::getpid()) + ".h5";
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = scratch_path();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    lpdiag::preflight_trace(path, 2);  // well under libFuzzer's -timeout
    lpdiag::TraceReader r(path);
    const std::int64_t n = r.records();
    if (n > 0) {
      const std::int64_t take = n < 64 ? n : 64;
      r.steps(0, take);
      for (const auto& s : r.layout().scalars) r.series("/scalars/" + s, 0, take);
      for (const auto& a : r.layout().attention) r.attention(a.layer_index, 0, take);
      for (const auto& m : r.layout().matrices) r.series("/weights/" + m.name + "/spectral_norm", 0, take);
    }
    r.events();
    const auto binned = lpdiag::analysis::bin_traces({path}, 64, {}, 1, true);
    lpdiag::analysis::reconstruct_chain(binned, 5.0);
  } catch (const lpdiag::Error&) {
  }
  try {
    lpdiag::preflight_capture(path, 2);
    lpdiag::read_capture(path);
  } catch (const lpdiag::Error&) {
  }
  return 0;
}
