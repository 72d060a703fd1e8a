#include "lpdiag/trace/trace_writer.hpp"

#include <signal.h>

#include <csignal>
#include "lpdiag/trace/event_text.hpp"
#include "lpdiag/trace/writer_lock.hpp"

#include <cerrno>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <iostream>

#include "event_type.hpp"
#include "h5.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/trace/trace_schema.hpp"

namespace {
// HDF5 closes every file still open when the process exits. A trace whose writes failed (a full
// disk, a file-size limit) cannot be closed, and that exit-time close crashed the process
// (SIGSEGV in H5F__close_cb) after training had finished. Writers close their files themselves,
// so HDF5's exit handler is turned off when this library loads (no effect if HDF5 is already
// initialized, e.g. by h5py).
const bool kNoHdf5Atexit = H5dont_atexit() >= 0;
}  // namespace

namespace lpdiag {

using schema::Elem;
using Extract = std::function<void(const TraceRecord&, unsigned char*)>;

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

hid_t mem_type(Elem e) {
  switch (e) {
    case Elem::i64: return H5T_NATIVE_INT64;
    case Elem::f64: return H5T_NATIVE_DOUBLE;
    case Elem::f32: return H5T_NATIVE_FLOAT;
  }
  return H5T_NATIVE_DOUBLE;
}

hid_t file_type(Elem e) {
  switch (e) {
    case Elem::i64: return H5T_STD_I64LE;
    case Elem::f64: return H5T_IEEE_F64LE;
    case Elem::f32: return H5T_IEEE_F32LE;
  }
  return H5T_IEEE_F64LE;
}

}  // namespace

// One extendible dataset and the rows waiting to be written to it.
struct Column {
  h5::Handle dset;
  Elem elem;
  hsize_t width;  // 1 for [T], H for [T,H]
  Extract extract;
  std::vector<unsigned char> pending;
  std::vector<unsigned char> flushing;  // background flush: the rows being written now
  hsize_t rows_on_disk = 0;
};

struct TraceWriter::Impl {
  std::string path;
  std::unique_ptr<WriterLock> lock;  // of the trace at `path`: an old one from the start, ours from publish() to close
  // The new trace is built at build_path (beside `path`) and renamed onto `path` only when every
  // group and dataset exists and SWMR is on: a writer killed while creating leaves `path` as it
  // was (absent, or the old trace whole) and a stray NAME.creating.<pid> file, never a half-made trace.
  std::string build_path;
  std::unique_ptr<WriterLock> build_lock;
  TraceLayout layout;
  TraceWriterOptions opt;
  h5::Handle file;
  std::vector<Column> columns;  // everything but /step
  Column step;
  h5::Handle events;
  h5::Handle event_type;
  std::vector<schema::EventRow> pending_events;
  hsize_t events_on_disk = 0;
  std::int64_t pending_rows = 0;
  std::chrono::steady_clock::time_point last_flush = std::chrono::steady_clock::now();
  std::int64_t last_step = 0;
  bool any_step = false;
  std::atomic<bool> failed{false};
  bool closed = false;
  std::string error;  // written before `failed` is set
  std::atomic<std::int64_t> committed{0};  // rows of /step on disk
  // Background flush (TraceWriterOptions::background_flush): the flushing thread, its job flag
  // and the buffers handed to it (each column's `flushing`, `flushing_events`).
  std::thread flusher;
  std::mutex job_mu;
  std::condition_variable job_cv;
  bool job = false, stop_flusher = false;
  std::vector<schema::EventRow> flushing_events;
  std::int64_t flushing_last_step = 0;
  void start_flusher();
  void wait_job();
  void stop_flush_thread();
  void hand_over();  // the buffered rows to the flushing thread
  void write_rows(Column& c, std::vector<unsigned char>& buf);
  void write_event_rows(std::vector<schema::EventRow>& rows);
  void flush_buffers(bool handed);
  std::int64_t dropped = 0;

  void create(const TraceHeader& header);
  void publish();
  h5::Handle make_group(const std::string& p);
  Column make_column(const std::string& p, Elem e, hsize_t width, Extract ex);
  void write_column(Column& c);
  void write_events();
  void do_flush();
  void check_headroom() const;
  void report_failure(const std::string& msg, bool from_flusher = false);
  ~Impl() { stop_flush_thread(); }
  // Forgets every HDF5 handle without closing it (nothing more is written) and drops the lock.
  void abandon();
};

void TraceWriter::Impl::abandon() {
  for (Column& c : columns) c.dset.abandon();
  step.dset.abandon();
  events.abandon();
  event_type.reset();
  file.abandon();
  H5Eclear2(H5E_DEFAULT);
  lock.reset();
  build_lock.reset();
}

void TraceWriter::Impl::publish() {
  if (!lock->holds()) {
    // No trace was at `path` when this one began: take the name only while it is still free
    // (another writer may have published there meanwhile, and a live trace is never replaced).
    if (::renameat2(AT_FDCWD, build_path.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) {
      lock = std::move(build_lock), build_path.clear();
      return;
    }
    const int err = errno;
    if (err == EEXIST && WriterLock::held_by_another(path))
      throw WriteError(path + ": another writer began recording this trace meanwhile; it was left untouched (give this run another path)");
    if (err != EEXIST && err != EINVAL && err != ENOSYS)  // EINVAL / ENOSYS: no RENAME_NOREPLACE here, rename below
      throw WriteError(path + ": cannot put the new trace in place (" + std::strerror(err) + ")");
  }
  if (::rename(build_path.c_str(), path.c_str()) != 0)
    throw WriteError(path + ": cannot put the new trace in place (" + std::strerror(errno) + ")");
  lock = std::move(build_lock), build_path.clear();  // the old trace's lock goes with its inode
}

h5::Handle TraceWriter::Impl::make_group(const std::string& p) {
  return h5::group_handle(H5Gcreate2(file.get(), p.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                          h5::Failure::write, path, "creating group " + p);
}

Column TraceWriter::Impl::make_column(const std::string& p, Elem e, hsize_t width, Extract ex) {
  const int rank = width == 1 ? 1 : 2;
  hsize_t dims[2] = {0, width};
  hsize_t maxdims[2] = {H5S_UNLIMITED, width};
  hsize_t chunk[2] = {static_cast<hsize_t>(opt.chunk_rows), width};
  h5::Handle space = h5::space_handle(H5Screate_simple(rank, dims, maxdims), h5::Failure::write, path, "dataspace for " + p);
  h5::Handle dcpl = h5::plist_handle(H5Pcreate(H5P_DATASET_CREATE), h5::Failure::write, path, "properties for " + p);
  h5::checked(H5Pset_chunk(dcpl.get(), rank, chunk), h5::Failure::write, path, "chunking " + p);
  if (opt.compression > 0) {
    h5::checked(H5Pset_shuffle(dcpl.get()), h5::Failure::write, path, "shuffle filter for " + p);
    h5::checked(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(opt.compression)), h5::Failure::write, path,
                "deflate filter for " + p);
  }
  // Rows extended but never written read as "unmeasured".
  const std::int64_t fill_i = -1;
  const double fill_d = std::nan("");
  const float fill_f = std::nanf("");
  const void* fill = e == Elem::i64 ? static_cast<const void*>(&fill_i)
                     : e == Elem::f64 ? static_cast<const void*>(&fill_d)
                                      : static_cast<const void*>(&fill_f);
  h5::checked(H5Pset_fill_value(dcpl.get(), mem_type(e), fill), h5::Failure::write, path, "fill value for " + p);
  Column c;
  c.dset = h5::dataset_handle(
      H5Dcreate2(file.get(), p.c_str(), file_type(e), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
      h5::Failure::write, path, "creating dataset " + p);
  c.elem = e;
  c.width = width;
  c.extract = std::move(ex);
  return c;
}

void TraceWriter::Impl::create(const TraceHeader& header) {
  h5::silence_errors();
  // A live trace of another writer is refused; an old one is held (so no other writer takes it)
  // until the new one replaces it.
  lock = std::make_unique<WriterLock>(WriterLock::if_exists(path));
  build_path = path + ".creating." + std::to_string(::getpid());
  build_lock = std::make_unique<WriterLock>(build_path);
  // Past a file-size limit (ulimit -f) the kernel kills a writer with SIGXFSZ unless it is
  // ignored; ignored, write() fails with EFBIG and the writer reports it and drops records.
  // Only a default disposition is changed, never a handler the program installed.
  {
    struct sigaction old_action {};
    if (sigaction(SIGXFSZ, nullptr, &old_action) == 0 && old_action.sa_handler == SIG_DFL) std::signal(SIGXFSZ, SIG_IGN);
  }
  h5::Handle fapl = h5::plist_handle(H5Pcreate(H5P_FILE_ACCESS), h5::Failure::write, path, "file access properties");
  // SWMR needs the latest file format (superblock v3).
  h5::checked(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST), h5::Failure::write, path,
              "selecting the SWMR file format");
  // A buffered write() that spans pages can be cut between pages by SIGKILL; a metadata block
  // torn that way fails its checksum forever. Paged aggregation keeps every metadata block inside
  // one 4 KiB page of metadata only; small raw data (a deflated chunk of a few rows) shares pages
  // with other raw data instead of taking a page each (page-aligning every allocation made a
  // GPT-2-small trace, ~700 datasets with a new chunk each per flush, 200 KB per record).
  h5::Handle fcpl = h5::plist_handle(H5Pcreate(H5P_FILE_CREATE), h5::Failure::write, path, "file creation properties");
  h5::checked(H5Pset_file_space_strategy(fcpl.get(), H5F_FSPACE_STRATEGY_PAGE, 0, 1), h5::Failure::write, path, "paged file space");
  h5::checked(H5Pset_file_space_page_size(fcpl.get(), 4096), h5::Failure::write, path, "file space page size");
  file = h5::file_handle(H5Fcreate(build_path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), h5::Failure::write, path,
                         "cannot create the trace file (check the directory exists and is writable)");
  const hid_t root = file.get();
  h5::write_attr_string(root, "lpdiag_format", schema::kFormat, path);
  h5::write_attr_i64(root, "lpdiag_version", schema::kVersion, path);
  h5::write_attr_string(root, "producer", header.producer.empty() ? "lpdiag 0.1.0" : header.producer, path);
  h5::write_attr_string(root, "created_utc", header.created_utc.empty() ? utc_now() : header.created_utc, path);
  h5::write_attr_string(root, "run_config", header.run_config, path);
  h5::write_attr_i64(root, "rank", header.rank, path);
  h5::write_attr_i64(root, "world_size", header.world_size, path);

  step = make_column(schema::kStepPath, Elem::i64, 1, [](const TraceRecord& r, unsigned char* out) {
    std::memcpy(out, &r.step, 8);
  });

  make_group(schema::kScalars);
  for (std::size_t i = 0; i < layout.scalars.size(); ++i)
    columns.push_back(make_column(schema::scalar_path(layout.scalars[i]), Elem::f64, 1,
                                  [i](const TraceRecord& r, unsigned char* out) { std::memcpy(out, &r.scalars[i], 8); }));

  make_group(schema::kAttention);
  for (std::size_t l = 0; l < layout.attention.size(); ++l) {
    const AttentionLayerSpec& a = layout.attention[l];
    const std::string g = schema::attention_group(a.name);
    h5::Handle grp = make_group(schema::group_path(g));
    h5::write_attr_i64(grp.get(), "layer_index", a.layer_index, path);
    h5::write_attr_i64(grp.get(), "n_heads", a.n_heads, path);
    h5::write_attr_i64(grp.get(), "head_dim", a.head_dim, path);
    h5::write_attr_string(grp.get(), "policy", a.policy, path);
    h5::write_attr_string(grp.get(), "fix", a.fix, path);
    if (!a.spec.empty()) h5::write_attr_string(grp.get(), "spec", a.spec, path);
    for (const schema::HeadField& f : schema::kHeadFields) {
      const std::size_t sz = schema::elem_size(f.elem);
      const std::size_t off = f.offset;
      columns.push_back(make_column(g + f.name, f.elem, static_cast<hsize_t>(a.n_heads),
                                    [l, off, sz](const TraceRecord& r, unsigned char* out) {
                                      for (const HeadCounters& h : r.attention[l]) {
                                        std::memcpy(out, reinterpret_cast<const unsigned char*>(&h) + off, sz);
                                        out += sz;
                                      }
                                    }));
    }
  }

  make_group(schema::kWeights);
  make_group(schema::kUpdates);
  for (std::size_t m = 0; m < layout.matrices.size(); ++m) {
    const MatrixSpec& s = layout.matrices[m];
    for (const std::string& g : {schema::weight_group(s.name), schema::update_group(s.name)}) {
      h5::Handle grp = make_group(schema::group_path(g));
      h5::write_attr_string(grp.get(), "role", s.role, path);
      h5::write_attr_i64(grp.get(), "layer_index", s.layer_index, path);
      h5::write_attr_i64(grp.get(), "rows", s.rows, path);
      h5::write_attr_i64(grp.get(), "cols", s.cols, path);
      h5::write_attr_i64(grp.get(), "n_heads", s.n_heads, path);
      h5::write_attr_string(grp.get(), "source", s.source, path);
    }
    const std::string w = schema::weight_group(s.name), u = schema::update_group(s.name);
    columns.push_back(make_column(w + schema::kSpectralNorm, Elem::f64, 1, [m](const TraceRecord& r, unsigned char* o) { std::memcpy(o, &r.weights[m].spectral_norm, 8); }));
    columns.push_back(make_column(w + schema::kFrobeniusNorm, Elem::f64, 1, [m](const TraceRecord& r, unsigned char* o) { std::memcpy(o, &r.weights[m].frobenius_norm, 8); }));
    columns.push_back(make_column(w + schema::kStableRank, Elem::f64, 1, [m](const TraceRecord& r, unsigned char* o) { std::memcpy(o, &r.weights[m].stable_rank, 8); }));
    if (s.n_heads > 0)
      columns.push_back(make_column(w + schema::kHeadSpectralNorm, Elem::f64, static_cast<hsize_t>(s.n_heads),
                                    [m](const TraceRecord& r, unsigned char* o) {
                                      const auto& v = r.weights[m].head_spectral_norm;
                                      std::memcpy(o, v.data(), v.size() * 8);
                                    }));
    columns.push_back(make_column(u + schema::kSigma1, Elem::f64, 1, [m](const TraceRecord& r, unsigned char* o) { std::memcpy(o, &r.updates[m].sigma1, 8); }));
    columns.push_back(make_column(u + schema::kConcentration, Elem::f64, 1, [m](const TraceRecord& r, unsigned char* o) { std::memcpy(o, &r.updates[m].concentration, 8); }));
    columns.push_back(make_column(u + schema::kSimilarityPrev, Elem::f64, 1, [m](const TraceRecord& r, unsigned char* o) { std::memcpy(o, &r.updates[m].similarity_prev, 8); }));
  }

  make_group(schema::kActivations);
  for (std::size_t i = 0; i < layout.activations.size(); ++i) {
    const std::string g = schema::activation_group(layout.activations[i].name);
    h5::Handle grp = make_group(schema::group_path(g));
    h5::write_attr_i64(grp.get(), "layer_index", layout.activations[i].layer_index, path);
    columns.push_back(make_column(g + schema::kMaxAbs, Elem::f32, 1, [i](const TraceRecord& r, unsigned char* o) { std::memcpy(o, &r.activations[i].max_abs, 4); }));
    columns.push_back(make_column(g + schema::kRms, Elem::f32, 1, [i](const TraceRecord& r, unsigned char* o) { std::memcpy(o, &r.activations[i].rms, 4); }));
  }

  // /events: compound, extendible.
  event_type = h5::event_row_type(h5::Failure::write, path);
  {
    hsize_t dims[1] = {0}, maxdims[1] = {H5S_UNLIMITED}, chunk[1] = {64};
    h5::Handle space = h5::space_handle(H5Screate_simple(1, dims, maxdims), h5::Failure::write, path, "event dataspace");
    h5::Handle dcpl = h5::plist_handle(H5Pcreate(H5P_DATASET_CREATE), h5::Failure::write, path, "event properties");
    h5::checked(H5Pset_chunk(dcpl.get(), 1, chunk), h5::Failure::write, path, "event chunking");
    events = h5::dataset_handle(H5Dcreate2(file.get(), schema::kEventsPath, event_type.get(), space.get(), H5P_DEFAULT,
                                           dcpl.get(), H5P_DEFAULT),
                                h5::Failure::write, path, "creating /events");
  }

  h5::checked(H5Fflush(file.get(), H5F_SCOPE_LOCAL), h5::Failure::write, path, "flushing the new trace");
  if (opt.swmr)
    h5::checked(H5Fstart_swmr_write(file.get()), h5::Failure::write, path, "switching to SWMR write mode");
  publish();
}

void TraceWriter::Impl::write_column(Column& c) { write_rows(c, c.pending); }

void TraceWriter::Impl::write_rows(Column& c, std::vector<unsigned char>& buf) {
  const std::size_t row_bytes = schema::elem_size(c.elem) * c.width;
  const hsize_t n = buf.size() / row_bytes;
  if (n == 0) return;
  const hsize_t new_rows = c.rows_on_disk + n;
  hsize_t dims[2] = {new_rows, c.width};
  h5::checked(H5Dset_extent(c.dset.get(), dims), h5::Failure::write, path, "extending a dataset");
  h5::Handle fspace = h5::space_handle(H5Dget_space(c.dset.get()), h5::Failure::write, path, "dataset space");
  hsize_t start[2] = {c.rows_on_disk, 0}, count[2] = {n, c.width};
  h5::checked(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), h5::Failure::write,
              path, "selecting rows");
  h5::Handle mspace = h5::space_handle(H5Screate_simple(c.width == 1 ? 1 : 2, count, nullptr), h5::Failure::write,
                                       path, "memory space");
  h5::checked(H5Dwrite(c.dset.get(), mem_type(c.elem), mspace.get(), fspace.get(), H5P_DEFAULT, buf.data()),
              h5::Failure::write, path, "writing rows");
  c.rows_on_disk = new_rows;
  buf.clear();
}

void TraceWriter::Impl::write_events() { write_event_rows(pending_events); }

void TraceWriter::Impl::write_event_rows(std::vector<schema::EventRow>& rows) {
  if (rows.empty()) return;
  const hsize_t n = rows.size();
  hsize_t dims[1] = {events_on_disk + n};
  h5::checked(H5Dset_extent(events.get(), dims), h5::Failure::write, path, "extending /events");
  h5::Handle fspace = h5::space_handle(H5Dget_space(events.get()), h5::Failure::write, path, "event space");
  hsize_t start[1] = {events_on_disk}, count[1] = {n};
  h5::checked(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), h5::Failure::write,
              path, "selecting events");
  h5::Handle mspace = h5::space_handle(H5Screate_simple(1, count, nullptr), h5::Failure::write, path, "event space");
  h5::checked(H5Dwrite(events.get(), event_type.get(), mspace.get(), fspace.get(), H5P_DEFAULT, rows.data()),
              h5::Failure::write, path, "writing events");
  events_on_disk += n;
  rows.clear();
}

// HDF5 records the end of its allocated space in the superblock before the data lands; a write
// cut short by a full disk or a file-size limit leaves a file HDF5 refuses to open ("truncated
// file"). So a flush that might not fit is not started: the writer stops with the file intact.
void TraceWriter::Impl::check_headroom() const {
  std::uintmax_t room = std::numeric_limits<std::uintmax_t>::max();
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  rlimit lim{};
  if (!ec && getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    room = lim.rlim_cur > size ? lim.rlim_cur - size : 0;
  struct statvfs vfs{};
  const std::string dir = std::filesystem::absolute(path, ec).parent_path().string();
  if (statvfs(dir.c_str(), &vfs) == 0) room = std::min<std::uintmax_t>(room, std::uintmax_t(vfs.f_bavail) * vfs.f_frsize);
  // Worst case: every dataset starts new chunks for the pending rows, uncompressed, plus a
  // chunk-index entry each, some metadata pages and the events. (The close after a failure
  // writes nothing, so no reserve for it: a 5 MB disk had kept 100 of 230 records of a 2.8 MB
  // trace with the old 512 KiB reserve and a chunk of slack per dataset.)
  std::uintmax_t need = 64 * 1024;
  const auto rows = static_cast<std::uintmax_t>(pending_rows);
  const auto chunk = static_cast<std::uintmax_t>(opt.chunk_rows);
  auto add = [&](const Column& c) {
    need += ((rows + chunk - 1) / chunk + 1) * chunk * schema::elem_size(c.elem) * c.width + 64;
  };
  for (const Column& c : columns) add(c);
  add(step);
  need += pending_events.size() * sizeof(schema::EventRow) + 64 * sizeof(schema::EventRow);
  if (room < need)
    throw WriteError(path + ": no room for the next flush (" + std::to_string(room) + " bytes left under the disk or "
                     "file-size limit, a flush may need " + std::to_string(need) + "); later records are dropped");
}

// `handed`: the buffers handed to the flushing thread; else the pending ones (in line).
void TraceWriter::Impl::flush_buffers(bool handed) {
  check_headroom();
  // Phase 1: every dataset but /step, and the events. Phase 2: /step, the commit point.
  for (Column& c : columns) write_rows(c, handed ? c.flushing : c.pending);
  write_event_rows(handed ? flushing_events : pending_events);
  h5::checked(H5Fflush(file.get(), H5F_SCOPE_LOCAL), h5::Failure::write, path, "flushing records");
  auto& steps = handed ? step.flushing : step.pending;
  if (!steps.empty()) {
    write_rows(step, steps);
    h5::checked(H5Fflush(file.get(), H5F_SCOPE_LOCAL), h5::Failure::write, path, "flushing /step");
  }
  committed = static_cast<std::int64_t>(step.rows_on_disk);
}

void TraceWriter::Impl::do_flush() {
  flush_buffers(false);
  pending_rows = 0;
  last_flush = std::chrono::steady_clock::now();
}

void TraceWriter::Impl::start_flusher() {
  flusher = std::thread([this] {
    std::unique_lock<std::mutex> lk(job_mu);
    for (;;) {
      job_cv.wait(lk, [this] { return job || stop_flusher; });
      if (!job) return;
      lk.unlock();
      if (!failed) {
        try {
          flush_buffers(true);
        } catch (const Error& e) {
          report_failure(e.what(), true);
        }
      }
      lk.lock();
      job = false;
      job_cv.notify_all();
    }
  });
}

void TraceWriter::Impl::wait_job() {
  std::unique_lock<std::mutex> lk(job_mu);
  job_cv.wait(lk, [this] { return !job; });
}

void TraceWriter::Impl::hand_over() {
  wait_job();  // the previous flush is done: its buffers are empty again
  pending_rows = 0;
  last_flush = std::chrono::steady_clock::now();
  if (failed) return;
  for (Column& c : columns) c.pending.swap(c.flushing);
  step.pending.swap(step.flushing);
  pending_events.swap(flushing_events);
  flushing_last_step = last_step;
  {
    std::lock_guard<std::mutex> lk(job_mu);
    job = true;
  }
  job_cv.notify_all();
}

void TraceWriter::Impl::stop_flush_thread() {
  if (!flusher.joinable()) return;
  wait_job();
  {
    std::lock_guard<std::mutex> lk(job_mu);
    stop_flusher = true;
  }
  job_cv.notify_all();
  flusher.join();
}

void TraceWriter::Impl::report_failure(const std::string& msg, bool from_flusher) {
  error = msg;
  failed = true;
  if (opt.on_error) opt.on_error(msg);
  else std::cerr << "lpdiag: trace writer stopped: " << msg << "\n";
  // Record the failure in the file if it still takes writes (it often will not). The flushing
  // thread touches only its own buffers: the caller's pending rows are dropped at close.
  try {
    for (Column& c : columns) (from_flusher ? c.flushing : c.pending).clear();
    (from_flusher ? step.flushing : step.pending).clear();
    if (from_flusher) flushing_events.clear();
    schema::EventRow e{};
    e.step = from_flusher ? flushing_last_step : last_step;
    std::strncpy(e.kind, "writer_error", sizeof e.kind - 1);
    e.layer_index = -1;
    e.head = -1;
    e.value = std::nan("");
    std::strncpy(e.message, fit_event_text(msg, sizeof e.message).c_str(), sizeof e.message - 1);
    std::vector<schema::EventRow> one(1, e);
    write_event_rows(one);
    H5Fflush(file.get(), H5F_SCOPE_LOCAL);
  } catch (const Error&) {
  }
  if (!from_flusher) pending_events.clear();
  H5Eclear2(H5E_DEFAULT);
}

TraceWriter::TraceWriter(const std::string& path, const TraceLayout& layout, const TraceHeader& header,
                         const TraceWriterOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->layout = layout;
  impl_->opt = options;
  if (impl_->opt.flush_every < 1) throw InvalidArgument("TraceWriter: flush_every must be >= 1");
  if (impl_->opt.compression < 0 || impl_->opt.compression > 9)
    throw InvalidArgument("TraceWriter: compression must be 0..9");
  if (impl_->opt.chunk_rows < 1) throw InvalidArgument("TraceWriter: chunk_rows must be >= 1");
  for (const auto& m : layout.matrices)
    if (!is_valid_role(m.role)) throw InvalidArgument("TraceWriter: matrix " + m.name + " has unknown role '" + m.role + "'");
  for (const auto& a : layout.attention)
    if (a.n_heads < 1) throw InvalidArgument("TraceWriter: attention layer " + a.name + " needs n_heads >= 1");
  try {
    impl_->create(header);
  } catch (...) {
    // Creation failed (a full disk, a size limit, another writer): the half-made file is not a
    // trace. Remove it; `path` was not touched (absent, or the old trace as it was).
    if (!impl_->build_path.empty() && impl_->build_lock) ::unlink(impl_->build_path.c_str());
    if (impl_->lock || impl_->build_lock) impl_->abandon();
    throw;
  }
  if (impl_->opt.background_flush) impl_->start_flusher();
}

TraceWriter::~TraceWriter() {
  try {
    close();
  } catch (...) {
  }
}

void TraceWriter::append(const TraceRecord& r) {
  Impl& s = *impl_;
  if (s.closed) throw InvalidArgument(s.path + ": append after close");
  const TraceLayout& L = s.layout;
  if (r.scalars.size() != L.scalars.size() || r.attention.size() != L.attention.size() ||
      r.weights.size() != L.matrices.size() || r.updates.size() != L.matrices.size() ||
      r.activations.size() != L.activations.size())
    throw InvalidArgument(s.path + ": record does not match the trace layout (use TraceRecord::unmeasured(layout, step))");
  for (std::size_t l = 0; l < L.attention.size(); ++l)
    if (static_cast<std::int64_t>(r.attention[l].size()) != L.attention[l].n_heads)
      throw InvalidArgument(s.path + ": attention layer " + L.attention[l].name + " expects " +
                            std::to_string(L.attention[l].n_heads) + " heads");
  for (std::size_t m = 0; m < L.matrices.size(); ++m)
    if (L.matrices[m].n_heads > 0 &&
        static_cast<std::int64_t>(r.weights[m].head_spectral_norm.size()) != L.matrices[m].n_heads)
      throw InvalidArgument(s.path + ": matrix " + L.matrices[m].name + " expects " +
                            std::to_string(L.matrices[m].n_heads) + " head spectral norms");
  if (s.any_step && r.step <= s.last_step)
    throw InvalidArgument(s.path + ": steps must increase (got " + std::to_string(r.step) + " after " +
                          std::to_string(s.last_step) + ")");
  s.last_step = r.step;
  s.any_step = true;
  if (s.failed) {
    ++s.dropped;
    if (s.opt.stop_on_error) throw WriteError(s.path + ": " + s.error);
    return;
  }
  auto push = [&r](Column& c) {
    const std::size_t row_bytes = schema::elem_size(c.elem) * c.width;
    const std::size_t at = c.pending.size();
    c.pending.resize(at + row_bytes);
    c.extract(r, c.pending.data() + at);
  };
  for (Column& c : s.columns) push(c);
  push(s.step);
  ++s.pending_rows;
  const bool due_by_time = s.opt.flush_seconds > 0 &&
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - s.last_flush).count() >= s.opt.flush_seconds;
  if (s.pending_rows >= s.opt.flush_every || due_by_time) flush();
}

void TraceWriter::set_flush_every(int records) {
  if (records < 1) throw InvalidArgument("TraceWriter: flush_every must be >= 1");
  impl_->opt.flush_every = records;
}

void TraceWriter::add_event(const TraceEvent& ev) {
  Impl& s = *impl_;
  if (s.failed || s.closed) return;
  schema::EventRow e{};
  e.step = ev.step;
  std::strncpy(e.kind, ev.kind.c_str(), sizeof e.kind - 1);
  e.layer_index = ev.layer_index;
  e.head = ev.head;
  e.value = ev.value;
  std::strncpy(e.message, fit_event_text(ev.message, sizeof e.message).c_str(), sizeof e.message - 1);
  s.pending_events.push_back(e);
}

void TraceWriter::flush() {
  Impl& s = *impl_;
  if (s.failed) {
    if (s.opt.stop_on_error) throw WriteError(s.path + ": " + s.error);
    return;
  }
  if (s.closed) return;
  if (s.flusher.joinable()) {
    s.hand_over();
    return;
  }
  try {
    s.do_flush();
  } catch (const Error& e) {
    s.report_failure(e.what());
    if (s.opt.stop_on_error) throw;
  }
}

void TraceWriter::sync() {
  flush();
  Impl& s = *impl_;
  if (s.flusher.joinable()) s.wait_job();
  if (s.failed && s.opt.stop_on_error) throw WriteError(s.path + ": " + s.error);
}

void TraceWriter::close() {
  Impl& s = *impl_;
  if (s.closed) return;
  s.stop_flush_thread();  // what it was writing lands first; the rest is flushed here, in line
  flush();
  s.closed = true;
  if (s.failed) {
    // A write already failed (disk full, size limit): the file is consistent as of its last
    // flush (SWMR), and closing it would write metadata that may not fit. Leave it as it is.
    s.abandon();
    return;
  }
  for (Column& c : s.columns) c.dset.reset();
  s.step.dset.reset();
  s.events.reset();
  s.event_type.reset();
  if (s.file.reset() < 0 && !s.failed) s.report_failure(s.path + ": closing the trace failed (" + h5::last_error() + ")");
  H5Eclear2(H5E_DEFAULT);
  s.lock.reset();
}

const TraceLayout& TraceWriter::layout() const { return impl_->layout; }
const std::string& TraceWriter::path() const { return impl_->path; }
bool TraceWriter::failed() const { return impl_->failed; }
const std::string& TraceWriter::error() const { return impl_->error; }
std::int64_t TraceWriter::records_committed() const { return impl_->committed; }
std::int64_t TraceWriter::records_dropped() const { return impl_->dropped; }

}  // namespace lpdiag
