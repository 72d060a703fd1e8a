#include "termination_flush.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace lpdiag::hooks::termination {
namespace {

volatile sig_atomic_t g_signal = 0;
std::atomic<bool> g_installed{false};
std::atomic<bool> g_claimed{false};  // a record() is closing the trace: the watchdog stands down
bool g_ours[2] = {false, false};     // SIGTERM, SIGINT: handlers installed here

// The writers' last resort, by registration id (one per open Monitor).
std::mutex g_flushers_mutex;
std::map<int, std::function<void()>>& flushers() {
  static auto* m = new std::map<int, std::function<void()>>;  // never destroyed: the watchdog may outlive exit
  return *m;
}
int g_next_id = 1;

void run_flushers() {
  std::lock_guard<std::mutex> lk(g_flushers_mutex);
  for (auto& [id, fn] : flushers()) {
    try {
      fn();
    } catch (...) {  // the process ends next: nothing more to do for this writer
    }
  }
}

// LPDIAG_TERMINATION_GRACE_S: how long a signal may wait for the next record (default 60; 0:
// forever). A loop stuck for longer ends by the signal's default action, unflushed.
double grace_seconds() {
  const char* v = std::getenv("LPDIAG_TERMINATION_GRACE_S");
  if (!v || !*v) return 60.0;
  try {
    const double s = std::stod(v);
    return s >= 0 ? s : 60.0;
  } catch (const std::exception&) {
    return 60.0;
  }
}

void watchdog(double grace) {
  using clock = std::chrono::steady_clock;
  clock::time_point seen{};
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const int sig = g_signal;
    if (sig == 0 || g_claimed.load()) continue;
    if (seen == clock::time_point{}) seen = clock::now();
    if (std::chrono::duration<double>(clock::now() - seen).count() >= grace) {
      run_flushers();
      reraise(sig);
    }
  }
}

// A forked child (a data-loader worker, say) records nothing: it gets the default actions back,
// so a signal ends it at once instead of waiting for a record that never comes.
extern "C" void child_after_fork() {
  if (g_ours[0]) signal(SIGTERM, SIG_DFL);
  if (g_ours[1]) signal(SIGINT, SIG_DFL);
}

extern "C" void on_signal(int sig) {
  if (g_signal != 0) {  // a second signal: do not wait for the next record
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  g_signal = sig;
}

}  // namespace

void install() {
  if (g_installed.exchange(true)) return;
  for (int i = 0; i < 2; ++i) {
    const int sig = i == 0 ? SIGTERM : SIGINT;
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) continue;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    g_ours[i] = sigaction(sig, &sa, nullptr) == 0;
  }
  if (!g_ours[0] && !g_ours[1]) return;
  pthread_atfork(nullptr, nullptr, child_after_fork);
  const double grace = grace_seconds();
  if (grace > 0) std::thread(watchdog, grace).detach();
}

void claim() { g_claimed.store(true); }

int add_last_resort(std::function<void()> flush) {
  std::lock_guard<std::mutex> lk(g_flushers_mutex);
  const int id = g_next_id++;
  flushers().emplace(id, std::move(flush));
  return id;
}

void remove_last_resort(int id) {
  std::lock_guard<std::mutex> lk(g_flushers_mutex);
  flushers().erase(id);
}

int pending() { return g_signal; }

void reraise(int sig) {
  signal(sig, SIG_DFL);
  raise(sig);
  _exit(128 + sig);  // not reached for SIGTERM / SIGINT with their default action
}

}  // namespace lpdiag::hooks::termination
