#include "h5.hpp"

#include <mutex>

#include "lpdiag/error.hpp"

namespace lpdiag::h5 {

void silence_errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

std::string last_error() {
  std::string msg;
  auto walker = [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
    auto* out = static_cast<std::string*>(data);
    if (e->desc && *e->desc) *out = e->desc;  // walking downward, the last one visited is the innermost
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walker, &msg);
  H5Eclear2(H5E_DEFAULT);
  return msg;
}

void fail(Failure kind, const std::string& file, const std::string& what) {
  std::string detail = last_error();
  std::string msg = file + ": " + what;
  if (!detail.empty()) msg += " (HDF5: " + detail + ")";
  if (kind == Failure::write) throw WriteError(msg);
  throw InputError(msg);
}

Handle checked(hid_t id, Handle::Closer closer, Failure kind, const std::string& file, const std::string& what) {
  if (id < 0) fail(kind, file, what);
  return Handle(id, closer);
}

void checked(herr_t status, Failure kind, const std::string& file, const std::string& what) {
  if (status < 0) fail(kind, file, what);
}

namespace {

Handle scalar_space(const std::string& file) {
  return space_handle(H5Screate(H5S_SCALAR), Failure::write, file, "creating a scalar dataspace");
}

void write_attr(hid_t obj, const std::string& name, hid_t type, const void* value, const std::string& file) {
  if (H5Aexists(obj, name.c_str()) > 0) checked(H5Adelete(obj, name.c_str()), Failure::write, file, "replacing attribute " + name);
  Handle space = scalar_space(file);
  Handle a = attr_handle(H5Acreate2(obj, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT), Failure::write,
                         file, "creating attribute " + name);
  checked(H5Awrite(a.get(), type, value), Failure::write, file, "writing attribute " + name);
}

Handle open_attr(hid_t obj, const std::string& name, const std::string& file) {
  if (H5Aexists(obj, name.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw InputError(file + ": missing attribute '" + name + "'");
  }
  return attr_handle(H5Aopen(obj, name.c_str(), H5P_DEFAULT), Failure::input, file, "opening attribute " + name);
}

}  // namespace

void write_attr_string(hid_t obj, const std::string& name, const std::string& value, const std::string& file) {
  Handle t = type_handle(H5Tcopy(H5T_C_S1), Failure::write, file, "string type");
  checked(H5Tset_size(t.get(), H5T_VARIABLE), Failure::write, file, "string type");
  checked(H5Tset_cset(t.get(), H5T_CSET_UTF8), Failure::write, file, "string type");
  const char* p = value.c_str();
  write_attr(obj, name, t.get(), &p, file);
}

void write_attr_i64(hid_t obj, const std::string& name, std::int64_t value, const std::string& file) {
  write_attr(obj, name, H5T_NATIVE_INT64, &value, file);
}

void write_attr_f64(hid_t obj, const std::string& name, double value, const std::string& file) {
  write_attr(obj, name, H5T_NATIVE_DOUBLE, &value, file);
}

bool has_attr(hid_t obj, const std::string& name) {
  const htri_t r = H5Aexists(obj, name.c_str());
  if (r < 0) H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

std::string read_attr_string(hid_t obj, const std::string& name, const std::string& file) {
  Handle a = open_attr(obj, name, file);
  Handle t = type_handle(H5Aget_type(a.get()), Failure::input, file, "attribute " + name);
  if (H5Tget_class(t.get()) != H5T_STRING) throw InputError(file + ": attribute '" + name + "' is not a string");
  Handle space = space_handle(H5Aget_space(a.get()), Failure::input, file, "attribute " + name);
  if (H5Sget_simple_extent_npoints(space.get()) != 1)
    throw InputError(file + ": attribute '" + name + "' is not a single string");
  const htri_t variable = H5Tis_variable_str(t.get());
  if (variable > 0) {
    Handle mem = type_handle(H5Tcopy(H5T_C_S1), Failure::input, file, "string type");
    checked(H5Tset_size(mem.get(), H5T_VARIABLE), Failure::input, file, "string type");
    checked(H5Tset_cset(mem.get(), H5Tget_cset(t.get())), Failure::input, file, "string type");
    char* p = nullptr;
    checked(H5Aread(a.get(), mem.get(), &p), Failure::input, file, "reading attribute " + name);
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  const std::size_t n = H5Tget_size(t.get());
  if (n == 0 || n > (1u << 24)) throw InputError(file + ": attribute '" + name + "' has an implausible size");
  std::string s(n, '\0');
  Handle mem = type_handle(H5Tcopy(H5T_C_S1), Failure::input, file, "string type");
  checked(H5Tset_size(mem.get(), n), Failure::input, file, "string type");
  checked(H5Tset_cset(mem.get(), H5Tget_cset(t.get())), Failure::input, file, "string type");
  checked(H5Aread(a.get(), mem.get(), s.data()), Failure::input, file, "reading attribute " + name);
  s.resize(s.find('\0') == std::string::npos ? n : s.find('\0'));
  return s;
}

namespace {
template <class T>
T read_attr_number(hid_t obj, const std::string& name, const std::string& file, hid_t mem_type, H5T_class_t want) {
  Handle a = open_attr(obj, name, file);
  Handle t = type_handle(H5Aget_type(a.get()), Failure::input, file, "attribute " + name);
  const H5T_class_t cls = H5Tget_class(t.get());
  if (cls != want && !(want == H5T_FLOAT && cls == H5T_INTEGER))
    throw InputError(file + ": attribute '" + name + "' has the wrong type (expected " +
                     (want == H5T_INTEGER ? "an integer" : "a number") + ")");
  Handle space = space_handle(H5Aget_space(a.get()), Failure::input, file, "attribute " + name);
  if (H5Sget_simple_extent_npoints(space.get()) != 1)
    throw InputError(file + ": attribute '" + name + "' is not a scalar");
  T v{};
  checked(H5Aread(a.get(), mem_type, &v), Failure::input, file, "reading attribute " + name);
  return v;
}
}  // namespace

std::int64_t read_attr_i64(hid_t obj, const std::string& name, const std::string& file) {
  return read_attr_number<std::int64_t>(obj, name, file, H5T_NATIVE_INT64, H5T_INTEGER);
}

double read_attr_f64(hid_t obj, const std::string& name, const std::string& file) {
  return read_attr_number<double>(obj, name, file, H5T_NATIVE_DOUBLE, H5T_FLOAT);
}

std::vector<std::string> list_children(hid_t group, const std::string& file) {
  std::vector<std::string> names;
  auto cb = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  hsize_t idx = 0;
  checked(H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &idx, cb, &names), Failure::input, file, "listing a group");
  return names;
}

bool link_exists(hid_t loc, const std::string& path) {
  // H5Lexists checks one level at a time; walk the path so a missing parent is not an error.
  std::string prefix;
  std::size_t start = path.front() == '/' ? 1 : 0;
  if (start) prefix = "/";
  while (start <= path.size()) {
    const std::size_t slash = path.find('/', start);
    const std::string part = path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    prefix += part;
    const htri_t r = H5Lexists(loc, prefix.c_str(), H5P_DEFAULT);
    if (r <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (slash == std::string::npos) break;
    prefix += "/";
    start = slash + 1;
  }
  return true;
}

}  // namespace lpdiag::h5
