// Opening a file someone handed you, safely. HDF5 1.10 is not hardened against corrupt files:
// fuzzing finds inputs on which the library itself frees bad pointers or reads out of bounds.
// A preflight parses the file in a forked child process (open, validate, read the first and
// last rows of every dataset and the events); a child that crashes becomes an InputError in the
// caller. Commands run it before opening a file for real.
#pragma once
#include <string>

namespace lpdiag {

// Throw InputError ("<file>: ...") when the file is unusable, including when parsing crashed.
// `seconds`: how long the child may parse before the file counts as corrupt (HDF5 can loop).
void preflight_trace(const std::string& path, unsigned seconds = 30);
void preflight_capture(const std::string& path, unsigned seconds = 30);

}  // namespace lpdiag
