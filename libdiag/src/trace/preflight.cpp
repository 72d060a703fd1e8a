#include "lpdiag/trace/preflight.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "lpdiag/error.hpp"
#include "lpdiag/trace/capture.hpp"
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
  for (const auto& s : r.layout().scalars) r.series("/scalars/" + s, row0, n);
  for (const auto& a : r.layout().attention) r.attention(a.layer_index, row0, n);
  for (const auto& m : r.layout().matrices) {
    r.series("/weights/" + m.name + "/spectral_norm", row0, n);
    if (m.n_heads > 0) r.series("/weights/" + m.name + "/head_spectral_norm", row0, n);
    r.series("/updates/" + m.name + "/sigma1", row0, n);
  }
  for (const auto& a : r.layout().activations) r.series("/activations/" + a.name + "/max_abs", row0, n);
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
  });
}

void preflight_capture(const std::string& path, unsigned seconds) {
  in_child(path, seconds, [&] { read_capture(path); });
}

}  // namespace lpdiag
