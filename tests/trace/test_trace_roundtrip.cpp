#include <chrono>
#include <cmath>
#include <thread>
#include <filesystem>
#include <string>

#include "catch_compat.hpp"
#include "temp_dir.hpp"
#include "lpdiag/error.hpp"
#include "lpdiag/trace/trace_reader.hpp"
#include "lpdiag/trace/trace_writer.hpp"
#include "trace_fixture.hpp"

using namespace lpdiag;
using namespace lpdiag::testing;

namespace {
std::string temp_path(const std::string& n) { return lpdiag_test::temp_path("test", n); }
}  // namespace

TEST_CASE("a trace round-trips: metadata, layout, every series, unmeasured fill, events", "[trace]") {
  const std::string path = temp_path("roundtrip.h5");
  const TraceLayout L = fixture_layout(3, 4);
  TraceHeader hdr;
  hdr.producer = "lpdiag test";
  hdr.run_config = R"({"n_layer":3,"lr":0.001})";
  hdr.rank = 1;
  hdr.world_size = 2;
  TraceWriterOptions opt;
  opt.flush_every = 7;
  opt.chunk_rows = 16;
  opt.compression = 4;
  const int n = 250;
  {
    TraceWriter w(path, L, hdr, opt);
    for (int i = 0; i < n; ++i) {
      w.append(fixture_record(L, 3 * i + 1));  // irregular stride is fine; only increase matters
      if (i % 50 == 0) w.add_event({3 * i + 1, "nan_inf", 1, 2, 3.5, "message " + std::to_string(i)});
    }
    w.add_event({0, std::string(40, 'k'), -1, -1, 0.0, std::string(300, 'm')});  // cut to fit
  }
  TraceReader r(path);
  CHECK(r.meta().format == "lpdiag-trace");
  CHECK(r.meta().version == 1);
  CHECK(r.meta().producer == "lpdiag test");
  CHECK(r.meta().run_config == hdr.run_config);
  CHECK(r.meta().rank == 1);
  CHECK(r.meta().world_size == 2);
  CHECK_FALSE(r.live());
  REQUIRE(r.records() == n);
  CHECK(r.layout().scalars.size() == L.scalars.size());
  REQUIRE(r.layout().attention.size() == 3);
  REQUIRE(r.attention_layer(2) != nullptr);
  CHECK(r.attention_layer(2)->n_heads == 4);
  CHECK(r.attention_layer(2)->fix == R"({"kind":"none"})");
  CHECK(r.attention_layer(7) == nullptr);
  CHECK(r.matrices("attn_q").size() == 3);
  CHECK(r.matrices("mlp_in").size() == 3);
  CHECK(r.matrices("attn_v").empty());

  const auto steps = r.steps(0, n);
  for (int i = 0; i < n; ++i) REQUIRE(steps[i] == 3 * i + 1);
  {
    // The buffer-reusing reads agree with series(); counters come as stored (int64), and asking
    // for a real-valued series as counts is an error, not a silent truncation.
    const std::string g = "/attention/" + r.attention_layer(2)->name + "/";
    std::vector<std::int64_t> rows;
    std::vector<double> sums(3, -1.0);
    r.read_counts(g + "rows", 1, n - 1, rows);
    r.read_series(g + "o_err_sum", 1, n - 1, sums);
    const auto rows_d = r.series(g + "rows", 1, n - 1), sums_d = r.series(g + "o_err_sum", 1, n - 1);
    REQUIRE(rows.size() == rows_d.size());
    REQUIRE(sums.size() == sums_d.size());
    for (std::size_t i = 0; i < rows.size(); ++i) CHECK(static_cast<double>(rows[i]) == rows_d[i]);
    for (std::size_t i = 0; i < sums.size(); ++i) CHECK((sums[i] == sums_d[i] || (std::isnan(sums[i]) && std::isnan(sums_d[i]))));
    CHECK_THROWS_AS(r.read_counts(g + "o_err_sum", 0, 1, rows), InvalidArgument);
  }
  const auto loss = r.series("/scalars/loss", 10, 20);
  for (int i = 0; i < 20; ++i) REQUIRE(loss[i] == fx(3 * (10 + i) + 1, 0));
  // Scalars are read back in name order; look them up by name.
  const auto tps = r.series("/scalars/tokens_per_s", 0, n);
  for (int i = 0; i < n; ++i) REQUIRE(tps[i] == fx(3 * i + 1, 3));

  const auto att = r.attention(1, 100, 5);
  REQUIRE(att.size() == 5 * 4);
  for (int i = 0; i < 5; ++i)
    for (int h = 0; h < 4; ++h) {
      const std::int64_t step = 3 * (100 + i) + 1;
      const HeadCounters& c = att[i * 4 + h];
      REQUIRE(c.rows == step * 1000 + 10 + h);
      REQUIRE(c.repeated_max_rows == step + h);
      REQUIRE(c.o_err_sum == -fx(step, 1, h));
      REQUIRE(c.delta_err_sum == fx(step, h, 1));
      REQUIRE(c.logit_max == static_cast<float>(fx(step, 1 + h)));
      REQUIRE(c.tile_repeated_max_rows == 0);
    }
  const std::string q = r.matrices("attn_q")[0]->name;
  CHECK(r.width("/weights/" + q + "/head_spectral_norm") == 4);
  const auto hs = r.series("/weights/" + q + "/head_spectral_norm", 3, 1);
  CHECK(hs[2] == fx(3 * 3 + 1, 0, 4));
  const auto sig = r.series("/updates/" + q + "/sigma1", 0, 2);
  CHECK(std::isnan(sig[0]));  // step 1 is odd: not measured
  CHECK(sig[1] == fx(4, 0, 3));
  const auto fro = r.series("/weights/" + q + "/frobenius_norm", 0, 1);
  CHECK(std::isnan(fro[0]));

  const auto ev = r.events();
  REQUIRE(ev.size() == 6);
  CHECK(ev[1].step == 151);
  CHECK(ev[1].kind == "nan_inf");
  CHECK(ev[1].layer_index == 1);
  CHECK(ev[1].head == 2);
  CHECK(ev[1].value == 3.5);
  CHECK(ev[1].message == "message 50");
  CHECK(ev[5].kind.size() == 31);
  CHECK(ev[5].message == std::string(124, 'm') + "...");  // one word: cut at a character, marked

  CHECK_THROWS_AS(r.series("/scalars/loss", n - 1, 2), InvalidArgument);
  CHECK_THROWS_AS(r.series("/scalars/nope", 0, 1), InvalidArgument);
}

TEST_CASE("the writer rejects records that do not fit the layout, and non-increasing steps", "[trace]") {
  const std::string path = temp_path("reject.h5");
  const TraceLayout L = fixture_layout();
  TraceWriter w(path, L);
  w.append(fixture_record(L, 5));
  CHECK_THROWS_AS(w.append(fixture_record(L, 5)), InvalidArgument);
  CHECK_THROWS_AS(w.append(fixture_record(L, 4)), InvalidArgument);
  TraceRecord bad = fixture_record(L, 9);
  bad.attention[0].pop_back();
  CHECK_THROWS_AS(w.append(bad), InvalidArgument);
  bad = fixture_record(L, 9);
  bad.scalars.push_back(1.0);
  CHECK_THROWS_AS(w.append(bad), InvalidArgument);
  w.append(fixture_record(L, 9));
  w.close();
  CHECK(TraceReader(path).records() == 2);
}

TEST_CASE("a trace path that cannot be written fails at construction", "[trace]") {
  CHECK_THROWS_AS(TraceWriter("/nonexistent-dir/x/run.h5", fixture_layout()), WriteError);
  TraceLayout L = fixture_layout();
  L.matrices[0].role = "attn_z";
  CHECK_THROWS_AS(TraceWriter(temp_path("role.h5"), L), InvalidArgument);
}

TEST_CASE("an empty trace (no records) is valid", "[trace]") {
  const std::string path = temp_path("empty.h5");
  { TraceWriter w(path, fixture_layout()); }
  TraceReader r(path);
  CHECK(r.records() == 0);
  CHECK(r.steps(0, 0).empty());
  CHECK(r.event_count() == 0);
}

TEST_CASE("a record appended flush_seconds after the last flush is flushed; set_flush_every takes effect at once", "[trace]") {
  const std::string path = temp_path("flush-by-time.h5");
  TraceWriterOptions o;
  o.flush_every = 1000;
  o.flush_seconds = 0.2;  // a live reader (lpdiag watch) sees a slow run within this, not after 1000 records
  TraceWriter w(path, fixture_layout(), {}, o);
  const TraceLayout& L = w.layout();
  w.append(fixture_record(L, 0));
  CHECK(w.records_committed() == 0);  // neither 1000 records nor 0.2 s yet
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  w.append(fixture_record(L, 1));
  CHECK(w.records_committed() == 2);
  w.set_flush_every(1);
  w.append(fixture_record(L, 2));
  CHECK(w.records_committed() == 3);
  CHECK_THROWS_AS(w.set_flush_every(0), InvalidArgument);
}

TEST_CASE("an attention layer's whole spec round-trips as the optional spec attribute", "[trace]") {
  const std::string path = temp_path("spec-attr.h5");
  TraceLayout L = fixture_layout(2, 2);
  L.attention[0].spec = R"({"causal":true,"fix":{"kind":"sr","seed":5},"level":"full","policy":"fa2","scale":0.0})";
  { TraceWriter w(path, L); }
  const TraceReader r(path);
  CHECK(r.layout().attention[0].spec == L.attention[0].spec);
  CHECK(r.layout().attention[1].spec.empty());  // absent: a writer that did not know it
}

TEST_CASE("background flush: every record and event lands, in order, as the in-line writer writes them", "[trace]") {
  const std::string a = temp_path("inline.h5"), b = temp_path("background.h5");
  for (const auto& [path, bg] : {std::pair{a, false}, std::pair{b, true}}) {
    TraceWriterOptions o;
    o.flush_every = 7;  // 250 records: 35 flushes, the last one partial
    o.background_flush = bg;
    TraceWriter w(path, fixture_layout(), {}, o);
    for (std::int64_t s = 0; s < 250; ++s) {
      w.append(fixture_record(w.layout(), s));
      if (s % 40 == 0) w.add_event({s, "note", 1, -1, double(s), "event " + std::to_string(s)});
    }
    w.sync();
    CHECK(w.records_committed() == 250);  // sync() flushes the partial last batch too, and waits for it
    w.close();
  }
  TraceReader ra(a), rb(b);
  REQUIRE(rb.records() == 250);
  CHECK(rb.steps(0, 250) == ra.steps(0, 250));
  for (const char* p : {"/scalars/loss", "/attention/h.1.attn/delta_err_sum"})
    if (ra.has_series(p)) CHECK(rb.series(p, 0, 250) == ra.series(p, 0, 250));
  const auto ea = ra.events(), eb = rb.events();
  REQUIRE(eb.size() == ea.size());
  for (std::size_t i = 0; i < ea.size(); ++i) CHECK((eb[i].step == ea[i].step && eb[i].message == ea[i].message));
}
