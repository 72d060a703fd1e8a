#include "termination_flush.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <initializer_list>
#include <cstdlib>

namespace lpdiag::hooks::termination {
namespace {

volatile sig_atomic_t g_signal = 0;
std::atomic<bool> g_installed{false};

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
  for (int sig : {SIGTERM, SIGINT}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) continue;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, nullptr);
  }
}

int pending() { return g_signal; }

void reraise(int sig) {
  signal(sig, SIG_DFL);
  raise(sig);
  _exit(128 + sig);  // not reached for SIGTERM / SIGINT with their default action
}

}  // namespace lpdiag::hooks::termination
