// Graceful termination (SIGTERM, SIGINT) must not lose up to a flush interval of records. A
// signal handler cannot write HDF5, so it only notes the signal; the next Monitor::record()
// flushes and closes the trace and re-raises the signal with its default action, so the process
// ends exactly as it would have, one step later. Handlers are installed only where the
// disposition is the default: a program's own handlers (Python's SIGINT -> KeyboardInterrupt)
// are never replaced. A second signal before the next record ends the process at once.
#pragma once

namespace lpdiag::hooks::termination {

void install();   // idempotent
int pending();    // the signal received, 0 if none
[[noreturn]] void reraise(int sig);  // default action restored, then the signal raised again

}  // namespace lpdiag::hooks::termination
