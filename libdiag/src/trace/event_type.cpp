#include "event_type.hpp"

#include "lpdiag/trace/trace_schema.hpp"

namespace lpdiag::h5 {

Handle event_row_type(Failure kind, const std::string& file) {
  using schema::EventRow;
  Handle t = type_handle(H5Tcreate(H5T_COMPOUND, sizeof(EventRow)), kind, file, "event type");
  Handle kind_t = type_handle(H5Tcopy(H5T_C_S1), kind, file, "event kind type");
  checked(H5Tset_size(kind_t.get(), schema::kEventKindLen), kind, file, "event kind type");
  Handle msg_t = type_handle(H5Tcopy(H5T_C_S1), kind, file, "event message type");
  checked(H5Tset_size(msg_t.get(), schema::kEventMessageLen), kind, file, "event message type");
  checked(H5Tinsert(t.get(), "step", HOFFSET(EventRow, step), H5T_NATIVE_INT64), kind, file, "event type");
  checked(H5Tinsert(t.get(), "kind", HOFFSET(EventRow, kind), kind_t.get()), kind, file, "event type");
  checked(H5Tinsert(t.get(), "layer_index", HOFFSET(EventRow, layer_index), H5T_NATIVE_INT32), kind, file, "event type");
  checked(H5Tinsert(t.get(), "head", HOFFSET(EventRow, head), H5T_NATIVE_INT32), kind, file, "event type");
  checked(H5Tinsert(t.get(), "value", HOFFSET(EventRow, value), H5T_NATIVE_DOUBLE), kind, file, "event type");
  checked(H5Tinsert(t.get(), "message", HOFFSET(EventRow, message), msg_t.get()), kind, file, "event type");
  return t;
}

}  // namespace lpdiag::h5
