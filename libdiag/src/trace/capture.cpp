#include "lpdiag/trace/capture.hpp"

#include <cmath>
#include <filesystem>

#include "h5.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/numerics/convert.hpp"
#include "lpdiag/trace/trace_schema.hpp"

namespace lpdiag {
namespace {

const FloatFormat* source_format(const std::string& dtype) {
  if (dtype == "float32") return nullptr;  // any finite float is exact
  return &format_by_name(dtype);
}

void check_tensor(const std::string& where, const std::string& name, const std::vector<float>& t, std::size_t want,
                  const FloatFormat* fmt, bool input_side) {
  auto bad = [&](const std::string& what) {
    if (input_side) throw InputError(where + ": " + what);
    throw InvalidArgument(where + ": " + what);
  };
  if (t.size() != want)
    bad("tensor '" + name + "' has " + std::to_string(t.size()) + " values, expected " + std::to_string(want));
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (!std::isfinite(t[i])) bad("tensor '" + name + "' has a non-finite value at flat index " + std::to_string(i));
    if (fmt && !is_representable(t[i], *fmt))
      bad("tensor '" + name + "' value " + std::to_string(t[i]) + " at flat index " + std::to_string(i) +
          " is not exact in " + fmt->name);
  }
}

void write_tensor(hid_t file, const std::string& path, const std::string& name, const std::vector<float>& t,
                  const std::vector<hsize_t>& dims) {
  h5::Handle space = h5::space_handle(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                                      h5::Failure::write, path, "dataspace for " + name);
  h5::Handle d = h5::dataset_handle(H5Dcreate2(file, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                                               H5P_DEFAULT, H5P_DEFAULT),
                                    h5::Failure::write, path, "creating dataset " + name);
  h5::checked(H5Dwrite(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data()), h5::Failure::write, path,
              "writing " + name);
}

std::vector<float> read_tensor(hid_t file, const std::string& path, const std::string& name,
                               const std::vector<hsize_t>& dims) {
  h5::Handle d = h5::dataset_handle(H5Dopen2(file, name.c_str(), H5P_DEFAULT), h5::Failure::input, path,
                                    "cannot open tensor " + name);
  h5::Handle t = h5::type_handle(H5Dget_type(d.get()), h5::Failure::input, path, "type of " + name);
  if (H5Tget_class(t.get()) != H5T_FLOAT || H5Tget_size(t.get()) != 4)
    throw InputError(path + ": tensor '" + name + "' must be float32");
  h5::Handle s = h5::space_handle(H5Dget_space(d.get()), h5::Failure::input, path, "shape of " + name);
  const int rank = H5Sget_simple_extent_ndims(s.get());
  std::vector<hsize_t> got(rank > 0 ? static_cast<std::size_t>(rank) : 0);
  if (rank > 0) H5Sget_simple_extent_dims(s.get(), got.data(), nullptr);
  if (got != dims) {
    std::string g, w;
    for (auto x : got) g += (g.empty() ? "" : ",") + std::to_string(x);
    for (auto x : dims) w += (w.empty() ? "" : ",") + std::to_string(x);
    throw InputError(path + ": tensor '" + name + "' has shape [" + g + "], expected [" + w + "]");
  }
  std::size_t n = 1;
  for (auto x : dims) n *= x;
  std::vector<float> out(n);
  h5::checked(H5Dread(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), h5::Failure::input, path,
              "reading " + name + " (file truncated or corrupt?)");
  return out;
}

}  // namespace

std::string capture_file_name(const std::string& trace_stem, std::int64_t step, std::int64_t layer_index) {
  return trace_stem + ".capture." + std::to_string(step) + "." + std::to_string(layer_index) + ".h5";
}

void write_capture(const std::string& path, const AttentionCapture& c) {
  h5::silence_errors();
  if (c.B < 1 || c.H < 1 || c.N < 1 || c.d < 1) throw InvalidArgument(path + ": capture shape must be positive");
  if (!(std::isfinite(c.scale) && c.scale > 0)) throw InvalidArgument(path + ": capture scale must be finite and > 0");
  const FloatFormat* fmt = source_format(c.source_dtype);
  const std::size_t n = c.elements();
  check_tensor(path, "q", c.q, n, fmt, false);
  check_tensor(path, "k", c.k, n, fmt, false);
  check_tensor(path, "v", c.v, n, fmt, false);
  check_tensor(path, "do", c.dout, n, fmt, false);
  h5::Handle f = h5::file_handle(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), h5::Failure::write,
                                 path, "cannot create the capture file");
  const hid_t root = f.get();
  h5::write_attr_string(root, "lpdiag_format", schema::kCaptureFormat, path);
  h5::write_attr_i64(root, "lpdiag_version", schema::kVersion, path);
  h5::write_attr_i64(root, "step", c.step, path);
  h5::write_attr_i64(root, "layer_index", c.layer_index, path);
  h5::write_attr_string(root, "layer", c.layer, path);
  h5::write_attr_string(root, "policy", c.policy, path);
  h5::write_attr_string(root, "fix", c.fix, path);
  h5::write_attr_i64(root, "causal", c.causal ? 1 : 0, path);
  h5::write_attr_f64(root, "scale", c.scale, path);
  h5::write_attr_string(root, "source_dtype", c.source_dtype, path);
  const std::vector<hsize_t> dims = {hsize_t(c.B), hsize_t(c.H), hsize_t(c.N), hsize_t(c.d)};
  write_tensor(root, path, "q", c.q, dims);
  write_tensor(root, path, "k", c.k, dims);
  write_tensor(root, path, "v", c.v, dims);
  write_tensor(root, path, "do", c.dout, dims);
  if (!c.o.empty()) {
    if (c.o.size() != n) throw InvalidArgument(path + ": tensor 'o' has the wrong size");
    write_tensor(root, path, "o", c.o, dims);
  }
  if (!c.lse.empty()) {
    if (c.lse.size() != n / static_cast<std::size_t>(c.d)) throw InvalidArgument(path + ": tensor 'lse' has the wrong size");
    write_tensor(root, path, "lse", c.lse, {dims[0], dims[1], dims[2]});
  }
  h5::checked(H5Fflush(root, H5F_SCOPE_LOCAL), h5::Failure::write, path, "flushing the capture");
  if (f.reset() < 0) h5::fail(h5::Failure::write, path, "closing the capture");
}

AttentionCapture read_capture(const std::string& path) {
  h5::silence_errors();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(path + ": no such file");
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw InputError(path + ": not an HDF5 file (expected an lpdiag attention capture)");
  }
  h5::Handle f = h5::file_handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), h5::Failure::input, path,
                                 "cannot open the HDF5 file (truncated or corrupt?)");
  const hid_t root = f.get();
  if (!h5::has_attr(root, "lpdiag_format"))
    throw InputError(path + ": HDF5 file is not an lpdiag capture (no lpdiag_format attribute)");
  const std::string fmt = h5::read_attr_string(root, "lpdiag_format", path);
  if (fmt == schema::kFormat) throw InputError(path + ": this is a trace, not an attention capture");
  if (fmt != schema::kCaptureFormat) throw InputError(path + ": not an lpdiag capture (lpdiag_format = '" + fmt + "')");
  const std::int64_t version = h5::read_attr_i64(root, "lpdiag_version", path);
  if (version != schema::kVersion)
    throw InputError(path + ": capture format version " + std::to_string(version) +
                     " is not supported (this lpdiag reads version 1)");
  AttentionCapture c;
  c.step = h5::read_attr_i64(root, "step", path);
  c.layer_index = h5::read_attr_i64(root, "layer_index", path);
  c.layer = h5::read_attr_string(root, "layer", path);
  c.policy = h5::read_attr_string(root, "policy", path);
  c.fix = h5::read_attr_string(root, "fix", path);
  c.causal = h5::read_attr_i64(root, "causal", path) != 0;
  c.scale = h5::read_attr_f64(root, "scale", path);
  c.source_dtype = h5::has_attr(root, "source_dtype") ? h5::read_attr_string(root, "source_dtype", path) : "float32";
  if (!(std::isfinite(c.scale) && c.scale > 0)) throw InputError(path + ": attribute 'scale' must be finite and > 0");
  const FloatFormat* sfmt = nullptr;
  try {
    sfmt = source_format(c.source_dtype);
  } catch (const InvalidArgument& e) {
    throw InputError(path + ": attribute 'source_dtype': " + e.what());
  }
  {
    h5::Handle d = h5::dataset_handle(H5Dopen2(root, "q", H5P_DEFAULT), h5::Failure::input, path, "cannot open tensor q");
    h5::Handle s = h5::space_handle(H5Dget_space(d.get()), h5::Failure::input, path, "shape of q");
    if (H5Sget_simple_extent_ndims(s.get()) != 4) throw InputError(path + ": tensor 'q' must have shape [B,H,N,d]");
    hsize_t dims[4];
    H5Sget_simple_extent_dims(s.get(), dims, nullptr);
    c.B = std::int64_t(dims[0]), c.H = std::int64_t(dims[1]), c.N = std::int64_t(dims[2]), c.d = std::int64_t(dims[3]);
    if (c.B < 1 || c.H < 1 || c.N < 1 || c.d < 1 || dims[0] * dims[1] * dims[2] * dims[3] > (hsize_t(1) << 34))
      throw InputError(path + ": tensor 'q' has an empty or implausible shape");
  }
  const std::vector<hsize_t> dims = {hsize_t(c.B), hsize_t(c.H), hsize_t(c.N), hsize_t(c.d)};
  c.q = read_tensor(root, path, "q", dims);
  c.k = read_tensor(root, path, "k", dims);
  c.v = read_tensor(root, path, "v", dims);
  c.dout = read_tensor(root, path, "do", dims);
  if (h5::link_exists(root, "o")) c.o = read_tensor(root, path, "o", dims);
  if (h5::link_exists(root, "lse")) c.lse = read_tensor(root, path, "lse", {dims[0], dims[1], dims[2]});
  const std::size_t n = c.elements();
  check_tensor(path, "q", c.q, n, sfmt, true);
  check_tensor(path, "k", c.k, n, sfmt, true);
  check_tensor(path, "v", c.v, n, sfmt, true);
  check_tensor(path, "do", c.dout, n, sfmt, true);
  return c;
}

}  // namespace lpdiag
