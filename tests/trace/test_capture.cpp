#include <cmath>
#include <filesystem>
#include <random>

#include "catch_compat.hpp"
#include "temp_dir.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/numerics/convert.hpp"
#include "lpdiag/trace/capture.hpp"
#include "test_seed.hpp"

using namespace lpdiag;

namespace {
std::string tmp(const std::string& n) { return lpdiag_test::temp_path("cap", n); }
AttentionCapture random_capture(std::uint64_t seed) {
  AttentionCapture c;
  c.step = 1234, c.layer_index = 3, c.layer = "transformer.h.3.attn", c.causal = true;
  c.fix = R"({"kind":"paper","beta":2})";
  c.B = 2, c.H = 3, c.N = 33, c.d = 8;
  c.scale = 1.0 / std::sqrt(8.0);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 2.0f);
  for (auto* t : {&c.q, &c.k, &c.v, &c.dout}) {
    t->resize(c.elements());
    for (float& x : *t) x = round_bf16(g(rng));
  }
  c.lse.resize(c.elements() / 8);
  for (float& x : c.lse) x = g(rng);
  return c;
}
}  // namespace

TEST_CASE("capture files round-trip every attribute and tensor", "[trace][capture]") {
  const AttentionCapture c = random_capture(lpdiag_test::seed("test_capture#3", 1023760u));
  const std::string p = tmp(capture_file_name("run", c.step, c.layer_index).c_str());
  CHECK(p.find("run.capture.1234.3.h5") != std::string::npos);
  write_capture(p, c);
  const AttentionCapture r = read_capture(p);
  CHECK(r.step == c.step);
  CHECK(r.layer_index == 3);
  CHECK(r.layer == c.layer);
  CHECK(r.fix == c.fix);
  CHECK(r.causal);
  CHECK(r.scale == c.scale);
  CHECK(r.source_dtype == "bfloat16");
  CHECK((r.B == 2 && r.H == 3 && r.N == 33 && r.d == 8));
  CHECK(r.q == c.q);
  CHECK(r.k == c.k);
  CHECK(r.v == c.v);
  CHECK(r.dout == c.dout);
  CHECK(r.lse == c.lse);
  CHECK(r.o.empty());
}

TEST_CASE("captures with NaN, values not exact in the source dtype, or wrong sizes are refused", "[trace][capture]") {
  AttentionCapture c = random_capture(5);
  c.k[3] = NAN;
  CHECK_THROWS_AS(write_capture(tmp("nan.h5"), c), InvalidArgument);
  c = random_capture(5);
  c.v[0] = 0.1f;  // not a bf16 value
  CHECK_THROWS_WITH(write_capture(tmp("inexact.h5"), c), lpdiag_test::contains("not exact in bf16"));
  c = random_capture(5);
  c.dout.pop_back();
  CHECK_THROWS_AS(write_capture(tmp("short.h5"), c), InvalidArgument);
  CHECK_THROWS_AS(read_capture(tmp("absent.h5")), InputError);
}
