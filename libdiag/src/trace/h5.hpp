// A thin, checked RAII layer over the HDF5 C API (private to libdiag: HDF5 never reaches a
// public header). Every call goes through check(); a failure becomes a typed lpdiag exception
// whose message names the file, the operation and HDF5's innermost error description. HDF5's
// own printing of its error stack is switched off process-wide.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lpdiag::h5 {

// Turns off HDF5's automatic error printing (idempotent).
void silence_errors();

// The innermost message on HDF5's current error stack, or "" when it is empty.
std::string last_error();

enum class Failure { input, write };

// Throws InputError or WriteError: "<file>: <what>: <hdf5 detail>".
[[noreturn]] void fail(Failure kind, const std::string& file, const std::string& what);

class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  ~Handle() { reset(); }
  // Closing never throws: a failed close during unwinding must not terminate the process.
  herr_t reset() noexcept {
    herr_t r = 0;
    if (id_ >= 0 && closer_) r = closer_(id_);
    id_ = H5I_INVALID_HID;
    return r;
  }
  // Forgets the id without closing it: after a failed write (a full disk), closing would write
  // again and could leave the file worse than its last successful flush.
  void abandon() noexcept { id_ = H5I_INVALID_HID; }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Checked constructors: `id` < 0 throws with `what` in the message.
Handle checked(hid_t id, Handle::Closer closer, Failure kind, const std::string& file, const std::string& what);
void checked(herr_t status, Failure kind, const std::string& file, const std::string& what);

inline Handle file_handle(hid_t id, Failure k, const std::string& f, const std::string& w) { return checked(id, H5Fclose, k, f, w); }
inline Handle group_handle(hid_t id, Failure k, const std::string& f, const std::string& w) { return checked(id, H5Gclose, k, f, w); }
inline Handle dataset_handle(hid_t id, Failure k, const std::string& f, const std::string& w) { return checked(id, H5Dclose, k, f, w); }
inline Handle space_handle(hid_t id, Failure k, const std::string& f, const std::string& w) { return checked(id, H5Sclose, k, f, w); }
inline Handle type_handle(hid_t id, Failure k, const std::string& f, const std::string& w) { return checked(id, H5Tclose, k, f, w); }
inline Handle plist_handle(hid_t id, Failure k, const std::string& f, const std::string& w) { return checked(id, H5Pclose, k, f, w); }
inline Handle attr_handle(hid_t id, Failure k, const std::string& f, const std::string& w) { return checked(id, H5Aclose, k, f, w); }

// Attributes on any object.
void write_attr_string(hid_t obj, const std::string& name, const std::string& value, const std::string& file);
void write_attr_i64(hid_t obj, const std::string& name, std::int64_t value, const std::string& file);
void write_attr_f64(hid_t obj, const std::string& name, double value, const std::string& file);
bool has_attr(hid_t obj, const std::string& name);
std::string read_attr_string(hid_t obj, const std::string& name, const std::string& file);
std::int64_t read_attr_i64(hid_t obj, const std::string& name, const std::string& file);
double read_attr_f64(hid_t obj, const std::string& name, const std::string& file);

// Names of the links directly under a group, in creation-independent (name) order.
std::vector<std::string> list_children(hid_t group, const std::string& file);
bool link_exists(hid_t loc, const std::string& path);

}  // namespace lpdiag::h5
