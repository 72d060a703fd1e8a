// `lpdiag repair`: a trace whose writer was killed keeps the "open for SWMR writing" status flags
// in its superblock, and HDF5 readers other than lpdiag's (h5py, h5ls) refuse it until they are
// cleared (what `h5clear -s` does). The data up to the last flush is intact either way.
#pragma once
#include <string>

namespace lpdiag {

struct RepairResult {
  bool changed = false;  // false: the flags were already clear (a cleanly closed trace)
  std::string message;   // what was found and done, for people
};

// Throws InputError for a file that is not an lpdiag trace, and WriteError when a live writer
// holds it (only a trace whose writer is gone may be repaired) or the flags cannot be cleared.
RepairResult repair_trace(const std::string& path);

}  // namespace lpdiag
