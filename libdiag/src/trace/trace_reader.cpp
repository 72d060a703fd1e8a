#include "lpdiag/trace/trace_reader.hpp"

#include <fcntl.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "event_type.hpp"
#include "h5.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/trace/trace_schema.hpp"

namespace lpdiag {

using schema::Elem;

namespace {

const char* elem_name(Elem e) { return e == Elem::i64 ? "int64" : e == Elem::f64 ? "float64" : "float32"; }

std::string type_description(hid_t t) {
  const H5T_class_t c = H5Tget_class(t);
  const std::size_t size = H5Tget_size(t);
  switch (c) {
    case H5T_INTEGER: return (H5Tget_sign(t) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(size * 8);
    case H5T_FLOAT: return "float" + std::to_string(size * 8);
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    default: return "an unsupported type";
  }
}

bool type_matches(hid_t t, Elem e) {
  const H5T_class_t c = H5Tget_class(t);
  const std::size_t size = H5Tget_size(t);
  switch (e) {
    case Elem::i64: return c == H5T_INTEGER && size == 8 && H5Tget_sign(t) == H5T_SGN_2;
    case Elem::f64: return c == H5T_FLOAT && size == 8;
    case Elem::f32: return c == H5T_FLOAT && size == 4;
  }
  return false;
}

}  // namespace

struct TraceReader::Impl {
  std::string path;
  h5::Handle file;
  bool swmr = false;
  TraceMeta meta;
  TraceLayout layout;
  std::int64_t records = 0;
  std::map<std::string, std::int64_t> widths;  // every validated series
  std::set<std::string> integer_series;         // those stored as int64

  [[noreturn]] void bad(const std::string& what) const {
    H5Eclear2(H5E_DEFAULT);
    throw InputError(path + ": " + what);
  }
  void open();
  void read_layout();
  // Datasets are opened per read and closed after it, so a chunk cache would never be hit
  // again; without one HDF5 reads whole chunks straight into the caller's buffer.
  h5::Handle no_chunk_cache;
  h5::Handle open_dataset(const std::string& p) const {
    h5::Handle d = h5::dataset_handle(H5Dopen2(file.get(), p.c_str(), no_chunk_cache.get()), h5::Failure::input, path,
                                      "cannot open dataset " + p);
    if (swmr) H5Drefresh(d.get());
    return d;
  }
  // Checks type and shape; returns the dataset's row count.
  std::int64_t validate(const std::string& p, Elem e, std::int64_t width) const;
  std::int64_t read_step_length() const;
  void read_rows(const std::string& p, std::int64_t row0, std::int64_t n, hid_t mem_type, void* out) const;
};

void TraceReader::Impl::open() {
  h5::silence_errors();
  no_chunk_cache = h5::plist_handle(H5Pcreate(H5P_DATASET_ACCESS), h5::Failure::input, path, "dataset access properties");
  H5Pset_chunk_cache(no_chunk_cache.get(), H5D_CHUNK_CACHE_NSLOTS_DEFAULT, 0, H5D_CHUNK_CACHE_W0_DEFAULT);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) bad("no such file");
  if (std::filesystem::is_directory(path, ec)) bad("is a directory, not a trace file");
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 <= 0) bad("not an HDF5 file (expected an lpdiag trace)");
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    H5Eclear2(H5E_DEFAULT);
    // A SWMR reader retries a metadata checksum failure (a writer may be mid-write) up to 100
    // times with growing sleeps by default; on a corrupt file that is minutes of waiting.
    h5::Handle fapl = h5::plist_handle(H5Pcreate(H5P_FILE_ACCESS), h5::Failure::input, path, "file access properties");
    H5Pset_metadata_read_attempts(fapl.get(), 8);
    f = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl.get());
    swmr = f >= 0;
  }
  if (f < 0) h5::fail(h5::Failure::input, path, "cannot open the HDF5 file (truncated or corrupt?)");
  file = h5::Handle(f, H5Fclose);

  const hid_t root = file.get();
  if (!h5::has_attr(root, "lpdiag_format")) bad("HDF5 file is not an lpdiag trace (no lpdiag_format attribute)");
  meta.format = h5::read_attr_string(root, "lpdiag_format", path);
  if (meta.format == schema::kCaptureFormat) bad("this is an attention capture, not a trace (use 'lpdiag replay')");
  if (meta.format != schema::kFormat) bad("HDF5 file is not an lpdiag trace (lpdiag_format = '" + meta.format + "')");
  meta.version = h5::read_attr_i64(root, "lpdiag_version", path);
  if (meta.version != schema::kVersion)
    bad("trace format version " + std::to_string(meta.version) + " is not supported (this lpdiag reads version " +
        std::to_string(schema::kVersion) + "); use a matching lpdiag");
  meta.producer = h5::read_attr_string(root, "producer", path);
  meta.created_utc = h5::read_attr_string(root, "created_utc", path);
  meta.run_config = h5::read_attr_string(root, "run_config", path);
  meta.rank = h5::read_attr_i64(root, "rank", path);
  meta.world_size = h5::read_attr_i64(root, "world_size", path);

  if (!h5::link_exists(root, schema::kStepPath)) bad(std::string("missing dataset ") + schema::kStepPath);
  records = validate(schema::kStepPath, Elem::i64, 1);
  widths[schema::kStepPath] = 1;
  integer_series.insert(schema::kStepPath);
  read_layout();
}

std::int64_t TraceReader::Impl::validate(const std::string& p, Elem e, std::int64_t width) const {
  if (!h5::link_exists(file.get(), p)) bad("missing dataset " + p);
  h5::Handle d = open_dataset(p);
  h5::Handle t = h5::type_handle(H5Dget_type(d.get()), h5::Failure::input, path, "type of " + p);
  if (!type_matches(t.get(), e))
    bad("dataset " + p + " has type " + type_description(t.get()) + ", expected " + elem_name(e));
  h5::Handle s = h5::space_handle(H5Dget_space(d.get()), h5::Failure::input, path, "shape of " + p);
  const int rank = H5Sget_simple_extent_ndims(s.get());
  const int want_rank = width == 1 ? 1 : 2;
  if (rank != want_rank && !(rank == 2 && width == 1))
    bad("dataset " + p + " has rank " + std::to_string(rank) + ", expected " + std::to_string(want_rank));
  hsize_t dims[2] = {0, 1};
  H5Sget_simple_extent_dims(s.get(), dims, nullptr);
  if (rank == 2 && static_cast<std::int64_t>(dims[1]) != width)
    bad("dataset " + p + " has " + std::to_string(dims[1]) + " columns, expected " + std::to_string(width));
  return static_cast<std::int64_t>(dims[0]);
}

void TraceReader::Impl::read_layout() {
  const hid_t root = file.get();
  auto check_len = [&](const std::string& p, Elem e, std::int64_t width) {
    const std::int64_t n = validate(p, e, width);
    if (n < records)
      bad("datasets have different lengths: " + p + " has " + std::to_string(n) + " rows, /step has " +
          std::to_string(records));
    const_cast<Impl*>(this)->widths[p] = width;
    if (e == Elem::i64) const_cast<Impl*>(this)->integer_series.insert(p);
  };
  auto children = [&](const std::string& g) -> std::vector<std::string> {
    if (!h5::link_exists(root, g)) return {};
    h5::Handle grp = h5::group_handle(H5Gopen2(root, g.c_str(), H5P_DEFAULT), h5::Failure::input, path, "opening " + g);
    return h5::list_children(grp.get(), path);
  };
  auto open_group = [&](const std::string& g) {
    return h5::group_handle(H5Gopen2(root, g.c_str(), H5P_DEFAULT), h5::Failure::input, path, "opening group " + g);
  };

  layout.scalars = children(schema::kScalars);
  for (const auto& s : layout.scalars) check_len(schema::scalar_path(s), Elem::f64, 1);

  for (const auto& name : children(schema::kAttention)) {
    const std::string g = schema::attention_group(name);
    h5::Handle grp = open_group(schema::group_path(g));
    AttentionLayerSpec a;
    a.name = name;
    a.layer_index = h5::read_attr_i64(grp.get(), "layer_index", path);
    a.n_heads = h5::read_attr_i64(grp.get(), "n_heads", path);
    a.head_dim = h5::read_attr_i64(grp.get(), "head_dim", path);
    a.policy = h5::read_attr_string(grp.get(), "policy", path);
    a.fix = h5::read_attr_string(grp.get(), "fix", path);
    if (h5::has_attr(grp.get(), "spec")) a.spec = h5::read_attr_string(grp.get(), "spec", path);
    if (a.n_heads < 1 || a.n_heads > (1 << 20)) bad("attention layer " + name + " has n_heads " + std::to_string(a.n_heads));
    for (const auto& f : schema::kHeadFields) check_len(g + f.name, f.elem, a.n_heads);
    layout.attention.push_back(a);
  }

  for (const auto& name : children(schema::kWeights)) {
    const std::string g = schema::weight_group(name);
    h5::Handle grp = open_group(schema::group_path(g));
    MatrixSpec m;
    m.name = name;
    m.role = h5::read_attr_string(grp.get(), "role", path);
    if (!is_valid_role(m.role)) bad("matrix " + name + " has unknown role '" + m.role + "'");
    m.layer_index = h5::read_attr_i64(grp.get(), "layer_index", path);
    m.rows = h5::read_attr_i64(grp.get(), "rows", path);
    m.cols = h5::read_attr_i64(grp.get(), "cols", path);
    m.n_heads = h5::read_attr_i64(grp.get(), "n_heads", path);
    m.source = h5::read_attr_string(grp.get(), "source", path);
    if (m.n_heads < 0 || m.n_heads > (1 << 20)) bad("matrix " + name + " has n_heads " + std::to_string(m.n_heads));
    for (const char* s : schema::kWeightSeries) check_len(g + s, Elem::f64, 1);
    if (m.n_heads > 0) check_len(g + schema::kHeadSpectralNorm, Elem::f64, m.n_heads);
    const std::string u = schema::update_group(name);
    for (const char* s : schema::kUpdateSeries) check_len(u + s, Elem::f64, 1);
    layout.matrices.push_back(m);
  }

  for (const auto& name : children(schema::kActivations)) {
    const std::string g = schema::activation_group(name);
    h5::Handle grp = open_group(schema::group_path(g));
    ActivationSpec a;
    a.name = name;
    a.layer_index = h5::read_attr_i64(grp.get(), "layer_index", path);
    for (const char* s : schema::kActivationSeries) check_len(g + s, Elem::f32, 1);
    layout.activations.push_back(a);
  }

  if (h5::link_exists(root, schema::kEventsPath)) {
    h5::Handle d = open_dataset(schema::kEventsPath);
    h5::Handle t = h5::type_handle(H5Dget_type(d.get()), h5::Failure::input, path, "type of /events");
    if (H5Tget_class(t.get()) != H5T_COMPOUND) bad("dataset /events is not a compound dataset");
    for (const char* member : {"step", "kind", "layer_index", "head", "value", "message"})
      if (H5Tget_member_index(t.get(), member) < 0) bad(std::string("dataset /events has no member '") + member + "'");
  }
}

std::int64_t TraceReader::Impl::read_step_length() const { return validate(schema::kStepPath, Elem::i64, 1); }

void TraceReader::Impl::read_rows(const std::string& p, std::int64_t row0, std::int64_t n, hid_t mem_type,
                                  void* out) const {
  auto it = widths.find(p);
  if (it == widths.end()) {
    if (p != schema::kStepPath) throw InvalidArgument(path + ": no series " + p);
  }
  const std::int64_t width = it == widths.end() ? 1 : it->second;
  if (row0 < 0 || n < 0 || row0 + n > records)
    throw InvalidArgument(path + ": rows [" + std::to_string(row0) + ", " + std::to_string(row0 + n) + ") of " + p +
                          " are outside the " + std::to_string(records) + " records");
  if (n == 0) return;
  h5::Handle d = open_dataset(p);
  h5::Handle fspace = h5::space_handle(H5Dget_space(d.get()), h5::Failure::input, path, "space of " + p);
  const int rank = H5Sget_simple_extent_ndims(fspace.get());
  hsize_t start[2] = {static_cast<hsize_t>(row0), 0};
  hsize_t count[2] = {static_cast<hsize_t>(n), static_cast<hsize_t>(width)};
  h5::checked(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), h5::Failure::input,
              path, "selecting rows of " + p);
  h5::Handle mspace = h5::space_handle(H5Screate_simple(rank, count, nullptr), h5::Failure::input, path, "memory space");
  h5::checked(H5Dread(d.get(), mem_type, mspace.get(), fspace.get(), H5P_DEFAULT, out), h5::Failure::input, path,
              "reading " + p + " (file truncated or corrupt?)");
}

TraceReader::TraceReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->open();
}
TraceReader::~TraceReader() = default;
TraceReader::TraceReader(TraceReader&&) noexcept = default;
TraceReader& TraceReader::operator=(TraceReader&&) noexcept = default;

const std::string& TraceReader::path() const { return impl_->path; }
const TraceMeta& TraceReader::meta() const { return impl_->meta; }
const TraceLayout& TraceReader::layout() const { return impl_->layout; }
bool TraceReader::live() const { return impl_->swmr; }

bool TraceReader::hint_sparse_reads() const {
  // The sec2 driver (HDF5's default) hands out its file descriptor; other drivers do not.
  if (H5Pget_driver(h5::Handle(H5Fget_access_plist(impl_->file.get()), H5Pclose).get()) != H5FD_SEC2) return false;
  void* handle = nullptr;
  if (H5Fget_vfd_handle(impl_->file.get(), H5P_DEFAULT, &handle) < 0 || handle == nullptr) {
    H5Eclear2(H5E_DEFAULT);
    return false;
  }
  return posix_fadvise(*static_cast<int*>(handle), 0, 0, POSIX_FADV_RANDOM) == 0;
}
std::int64_t TraceReader::records() const { return impl_->records; }

std::int64_t TraceReader::refresh() {
  if (impl_->swmr) impl_->records = impl_->read_step_length();
  return impl_->records;
}

std::vector<std::int64_t> TraceReader::steps(std::int64_t row0, std::int64_t n) const {
  std::vector<std::int64_t> out(static_cast<std::size_t>(std::max<std::int64_t>(n, 0)));
  impl_->read_rows(schema::kStepPath, row0, n, H5T_NATIVE_INT64, out.data());
  return out;
}

std::vector<double> TraceReader::series(const std::string& p, std::int64_t row0, std::int64_t n) const {
  std::vector<double> out;
  read_series(p, row0, n, out);
  return out;
}

void TraceReader::read_series(const std::string& p, std::int64_t row0, std::int64_t n, std::vector<double>& out) const {
  out.resize(static_cast<std::size_t>(std::max<std::int64_t>(n, 0) * width(p)));
  impl_->read_rows(p, row0, n, H5T_NATIVE_DOUBLE, out.data());
}

void TraceReader::read_counts(const std::string& p, std::int64_t row0, std::int64_t n, std::vector<std::int64_t>& out) const {
  const std::int64_t w = width(p);
  if (!impl_->integer_series.count(p)) throw InvalidArgument(impl_->path + ": " + p + " is not an integer series");
  out.resize(static_cast<std::size_t>(std::max<std::int64_t>(n, 0) * w));
  impl_->read_rows(p, row0, n, H5T_NATIVE_INT64, out.data());
}

std::int64_t TraceReader::width(const std::string& p) const {
  auto it = impl_->widths.find(p);
  if (it == impl_->widths.end()) throw InvalidArgument(impl_->path + ": no series " + p);
  return it->second;
}

bool TraceReader::has_series(const std::string& p) const { return impl_->widths.count(p) > 0; }

const AttentionLayerSpec* TraceReader::attention_layer(std::int64_t layer_index) const {
  for (const auto& a : impl_->layout.attention)
    if (a.layer_index == layer_index) return &a;
  return nullptr;
}

std::vector<const MatrixSpec*> TraceReader::matrices(const std::string& role) const {
  std::vector<const MatrixSpec*> out;
  for (const auto& m : impl_->layout.matrices)
    if (m.role == role) out.push_back(&m);
  return out;
}

std::vector<HeadCounters> TraceReader::attention(std::int64_t layer_index, std::int64_t row0, std::int64_t n) const {
  const AttentionLayerSpec* a = attention_layer(layer_index);
  if (!a) throw InvalidArgument(impl_->path + ": no attention layer with layer_index " + std::to_string(layer_index));
  const std::size_t cells = static_cast<std::size_t>(std::max<std::int64_t>(n, 0) * a->n_heads);
  std::vector<HeadCounters> out(cells);
  std::vector<unsigned char> buf;
  for (const auto& f : schema::kHeadFields) {
    const std::size_t sz = schema::elem_size(f.elem);
    buf.resize(cells * sz);
    const hid_t mt = f.elem == Elem::i64 ? H5T_NATIVE_INT64 : f.elem == Elem::f64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT;
    impl_->read_rows(schema::attention_group(a->name) + f.name, row0, n, mt, buf.data());
    for (std::size_t i = 0; i < cells; ++i)
      std::memcpy(reinterpret_cast<unsigned char*>(&out[i]) + f.offset, buf.data() + i * sz, sz);
  }
  return out;
}

std::int64_t TraceReader::event_count() const {
  if (!h5::link_exists(impl_->file.get(), schema::kEventsPath)) return 0;
  h5::Handle d = impl_->open_dataset(schema::kEventsPath);
  h5::Handle s = h5::space_handle(H5Dget_space(d.get()), h5::Failure::input, impl_->path, "space of /events");
  return H5Sget_simple_extent_npoints(s.get());
}

std::vector<TraceEvent> TraceReader::events() const {
  std::vector<TraceEvent> out;
  const std::int64_t n = event_count();
  if (n == 0) return out;
  if (n > 100'000'000) throw InputError(impl_->path + ": /events claims " + std::to_string(n) + " rows");
  h5::Handle d = impl_->open_dataset(schema::kEventsPath);
  const std::string& path = impl_->path;
  // HDF5 converts member by member, by name, into our struct.
  h5::Handle mt = h5::event_row_type(h5::Failure::input, path);
  std::vector<schema::EventRow> rows(static_cast<std::size_t>(n));
  h5::checked(H5Dread(d.get(), mt.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()), h5::Failure::input, path,
              "reading /events");
  for (const auto& r : rows) {
    TraceEvent e;
    e.step = r.step;
    e.kind.assign(r.kind, strnlen(r.kind, sizeof r.kind));
    e.layer_index = r.layer_index;
    e.head = r.head;
    e.value = r.value;
    e.message.assign(r.message, strnlen(r.message, sizeof r.message));
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace lpdiag
