// Writes good and deliberately broken trace/capture files into DIR, for the CLI and independent
// reader tests: make_trace_fixtures DIR
#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "lpdiag/trace/capture.hpp"
#include "lpdiag/trace/trace_writer.hpp"
#include "lpdiag/numerics/convert.hpp"
#include "trace_fixture.hpp"

using namespace lpdiag;
using namespace lpdiag::testing;

static void write_good(const std::string& path, int records) {
  const TraceLayout L = fixture_layout(2, 3);
  TraceHeader h;
  h.producer = "lpdiag fixtures";
  h.run_config = R"({"model":"fixture","n_layer":2,"n_head":3,"precision":"bf16"})";
  TraceWriterOptions o;
  o.flush_every = 10;
  TraceWriter w(path, L, h, o);
  for (int i = 0; i < records; ++i) w.append(fixture_record(L, 10 + i));
  w.add_event({12, "nan_inf", 1, 0, NAN, "loss is NaN"});
}

static void fail(const char* what) {
  std::fprintf(stderr, "make_trace_fixtures: %s\n", what);
  std::exit(1);
}

int main(int argc, char** argv) {
  if (argc != 2) fail("usage: make_trace_fixtures DIR");
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const std::string dir = argv[1];
  std::filesystem::create_directories(dir);
  write_good(dir + "/good.h5", 50);
  { std::ofstream(dir + "/not_hdf5.h5") << "this is a text file, not HDF5\n"; }
  {  // HDF5, but not a trace
    hid_t f = H5Fcreate((dir + "/foreign.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t n = 4;
    hid_t s = H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(f, "data", H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(d), H5Sclose(s), H5Fclose(f);
  }
  auto modify = [&](const std::string& name, auto&& edit) {
    const std::string p = dir + "/" + name;
    write_good(p, 30);
    hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) fail("cannot reopen a fixture");
    edit(f);
    H5Fclose(f);
  };
  modify("version99.h5", [](hid_t f) {
    hid_t a = H5Aopen(f, "lpdiag_version", H5P_DEFAULT);
    const std::int64_t v = 99;
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
  });
  modify("lengths.h5", [](hid_t f) {  // /scalars/loss shorter than /step
    hid_t d = H5Dopen2(f, "/scalars/loss", H5P_DEFAULT);
    hsize_t n = 12;
    if (H5Dset_extent(d, &n) < 0) fail("cannot shrink");
    H5Dclose(d);
  });
  modify("dtype.h5", [](hid_t f) {  // /step stored as float64
    H5Ldelete(f, "/step", H5P_DEFAULT);
    hsize_t n = 30;
    hid_t s = H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(f, "/step", H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(d), H5Sclose(s);
  });
  modify("attn_dtype.h5", [](hid_t f) {  // an attention counter stored as int32
    const char* p = "/attention/h.1.attn/repeated_max_rows";
    H5Ldelete(f, p, H5P_DEFAULT);
    hsize_t n[2] = {30, 3};
    hid_t s = H5Screate_simple(2, n, nullptr);
    hid_t d = H5Dcreate2(f, p, H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(d), H5Sclose(s);
  });

  // Captures: one good, one with a NaN, one whose values are not bf16.
  AttentionCapture c;
  c.step = 700, c.layer_index = 2, c.layer = "h.2.attn", c.causal = true;
  c.B = 1, c.H = 2, c.N = 48, c.d = 16;
  c.scale = 1.0 / std::sqrt(16.0);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> g;
  for (auto* t : {&c.q, &c.k, &c.v, &c.dout}) {
    t->resize(c.elements());
    for (float& x : *t) x = round_bf16(g(rng));
  }
  write_capture(capture_file_name(dir + "/run", 700, 2), c);
  AttentionCapture not_bf16 = c;
  not_bf16.source_dtype = "float32";
  not_bf16.q[5] = 0.1f;
  write_capture(dir + "/capture_not_bf16.h5", not_bf16);
  {  // flip the declared dtype back to bfloat16 so the reader must catch it
    hid_t f = H5Fopen((dir + "/capture_not_bf16.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    H5Adelete(f, "source_dtype");
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "source_dtype", t, s, H5P_DEFAULT, H5P_DEFAULT);
    const char* v = "bfloat16";
    H5Awrite(a, t, &v);
    H5Aclose(a), H5Sclose(s), H5Tclose(t), H5Fclose(f);
  }
  {
    const std::string p = dir + "/capture_nan.h5";
    write_capture(p, c);
    hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "v", H5P_DEFAULT);
    std::vector<float> v(c.elements());
    H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    v[17] = NAN;
    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(d), H5Fclose(f);
  }
  std::printf("fixtures written to %s\n", dir.c_str());
  return 0;
}
