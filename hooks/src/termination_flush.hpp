// Graceful termination (SIGTERM, SIGINT) must not lose up to a flush interval of records. A
// signal handler cannot write HDF5, so it only notes the signal; the next Monitor::record()
// flushes and closes the trace and re-raises the signal with its default action, so the process
// ends exactly as it would have, one step later. Handlers are installed only where the
// disposition is the default: a program's own handlers (Python's SIGINT -> KeyboardInterrupt)
// are never replaced. A second signal before the next record ends the process at once, and so
// does a wait longer than LPDIAG_TERMINATION_GRACE_S (default 60 s; 0: no limit) for a loop that
// is stuck and will not record again: the watchdog thread then runs each writer's last resort
// (which closes the trace when its owner is not inside it) and ends the process the same way.
// Forked children get the default actions back.
#pragma once
#include <functional>

namespace lpdiag::hooks::termination {

void install();   // idempotent
int pending();    // the signal received, 0 if none
void claim();     // the caller is closing the trace for it: the grace deadline no longer applies
// `flush` runs on the watchdog thread when the grace has run out, just before the process ends;
// it must not wait for the training thread (try_lock, not lock). Returns an id for remove.
int add_last_resort(std::function<void()> flush);
void remove_last_resort(int id);
[[noreturn]] void reraise(int sig);  // default action restored, then the signal raised again

}  // namespace lpdiag::hooks::termination
