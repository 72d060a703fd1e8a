#include "lpdiag/trace/preflight.hpp"
#include "lpdiag/trace/trace_schema.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>

#include "lpdiag/error.hpp"
#include "lpdiag/trace/capture.hpp"
#include "lpdiag/trace/step_order.hpp"
#include "lpdiag/trace/trace_reader.hpp"

namespace lpdiag {
namespace {

// Runs `work` in a child; its InputError message comes back through a pipe.
void in_child(const std::string& path, unsigned seconds, const std::function<void()>& work) {
  int fds[2];
  if (pipe(fds) != 0) throw InputError(path + ": cannot create a pipe for the preflight check");
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw InputError(path + ": cannot fork for the preflight check");
  }
  if (pid == 0) {
    close(fds[0]);
    // HDF5 can loop forever on some corrupt files. The default action (terminate) must apply
    // even when the parent installed its own SIGALRM handler (libFuzzer does).
    signal(SIGALRM, SIG_DFL);
    alarm(seconds);
    int code = 0;
    std::string msg;
    try {
      work();
    } catch (const std::exception& e) {
      msg = e.what();
      code = 3;
    }
    if (!msg.empty()) {
      ssize_t off = 0, n = static_cast<ssize_t>(msg.size());
      while (off < n) {
        const ssize_t w = write(fds[1], msg.data() + off, static_cast<std::size_t>(n - off));
        if (w <= 0) break;
        off += w;
      }
    }
    close(fds[1]);
    _exit(code);  // no atexit handlers: nothing of the parent's state is flushed twice
  }
  close(fds[1]);
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
    throw InputError(path + ": corrupt HDF5 file: parsing it did not finish within " +
                     std::to_string(seconds) + " s");
  if (WIFSIGNALED(status))
    throw InputError(path + ": corrupt HDF5 file: the HDF5 library crashed while parsing it (signal " +
                     std::to_string(WTERMSIG(status)) + ", " + strsignal(WTERMSIG(status)) + ")");
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    if (msg.empty()) msg = path + ": preflight check failed (exit " + std::to_string(WEXITSTATUS(status)) + ")";
    throw InputError(msg);
  }
}

void touch_rows(const TraceReader& r, std::int64_t row0, std::int64_t n) {
  if (n <= 0) return;
  r.steps(row0, n);
  for (const auto& s : r.layout().scalars) r.series(schema::scalar_path(s), row0, n);
  for (const auto& a : r.layout().attention) r.attention(a.layer_index, row0, n);
  for (const auto& m : r.layout().matrices) {
    r.series(schema::weight_group(m.name) + schema::kSpectralNorm, row0, n);
    if (m.n_heads > 0) r.series(schema::weight_group(m.name) + schema::kHeadSpectralNorm, row0, n);
    r.series(schema::update_group(m.name) + schema::kSigma1, row0, n);
  }
  for (const auto& a : r.layout().activations) r.series(schema::activation_group(a.name) + schema::kMaxAbs, row0, n);
}

// Every row's step, in blocks.
void check_steps(const TraceReader& r) {
  const std::int64_t n = r.records();
  std::int64_t prev = INT64_MIN;
  for (std::int64_t r0 = 0; r0 < n; r0 += 65536) {
    const auto s = r.steps(r0, std::min<std::int64_t>(65536, n - r0));
    check_step_order(r.path(), r0, s.data(), s.size(), prev);
  }
}

// Two attention layers (or two matrices of one role) claiming one layer_index make every
// per-layer result ambiguous.
void check_layout(const TraceReader& r) {
  std::vector<std::int64_t> seen;
  for (const auto& a : r.layout().attention) {
    if (std::count(seen.begin(), seen.end(), a.layer_index))
      throw InputError(r.path() + ": two attention layers have layer_index " + std::to_string(a.layer_index));
    seen.push_back(a.layer_index);
  }
}

}  // namespace

void preflight_trace(const std::string& path, unsigned seconds) {
  in_child(path, seconds, [&] {
    TraceReader r(path);
    const std::int64_t n = r.records();
    const std::int64_t k = std::min<std::int64_t>(n, 1024);
    touch_rows(r, 0, k);
    touch_rows(r, n - k, k);
    r.events();
    check_layout(r);
    // Large traces get the step check from the analyzers' one pass over /step instead (a cold
    // 1M-record /step is ~1000 scattered chunks).
    if (n < (1 << 18)) check_steps(r);
  });
}

void preflight_capture(const std::string& path, unsigned seconds) {
  in_child(path, seconds, [&] { read_capture(path); });
}

}  // namespace lpdiag
