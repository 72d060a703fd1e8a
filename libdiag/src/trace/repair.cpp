#include "lpdiag/trace/repair.hpp"

#include <hdf5.h>

#include "h5.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/trace/trace_reader.hpp"
#include "lpdiag/trace/writer_lock.hpp"

namespace lpdiag {

RepairResult repair_trace(const std::string& path) {
  bool live = false;
  std::int64_t records = 0;
  {
    const TraceReader r(path);  // an lpdiag trace at all (InputError otherwise)
    live = r.live();
    records = r.records();
  }
  if (!live) return {false, path + ": closed cleanly, nothing to repair (" + std::to_string(records) + " records)"};
  if (WriterLock::held_by_another(path))
    throw WriteError(path + ": a writer is recording this trace now; repair only a trace whose writer has died");
  h5::silence_errors();
  // HDF5's own "clear status flags" file-access property, the one h5clear sets.
  h5::Handle fapl = h5::plist_handle(H5Pcreate(H5P_FILE_ACCESS), h5::Failure::write, path, "file access properties");
  hbool_t clear = 1;
  h5::checked(H5Pset(fapl.get(), "clear_status_flags", &clear), h5::Failure::write, path, "asking HDF5 to clear the status flags");
  h5::checked(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), h5::Failure::write, path, "file format bounds");
  {
    h5::Handle f = h5::file_handle(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.get()), h5::Failure::write, path,
                                   "opening the trace to clear its status flags");
    if (f.reset() < 0) throw WriteError(path + ": closing the trace after clearing its flags failed (" + h5::last_error() + ")");
  }
  {
    const TraceReader r(path);
    if (r.live()) throw WriteError(path + ": the status flags are still set after the repair");
  }
  return {true, path + ": cleared the writer's status flags (it died without closing the file); " + std::to_string(records) +
                    " records up to the last flush are intact, and h5py, h5ls and h5dump can open it now"};
}

}  // namespace lpdiag
