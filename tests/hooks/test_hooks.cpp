// The LibTorch layer: the operator against the fp64 reference, its argument checks, and the
// Monitor's records, failure modes and captures.
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <random>

#include "lpdiag/hooks/attention_op.hpp"
#include "catch_compat.hpp"
#include "temp_dir.hpp"
#include "lpdiag/attention/attention_spec.hpp"
#include "lpdiag/attention/engine.hpp"
#include "lpdiag/attention/reference.hpp"
#include "lpdiag/hooks/counter_sink.hpp"
#include "lpdiag/trace/capture.hpp"
#include "lpdiag/trace/trace_reader.hpp"
#include "lpdiag/trace/trace_writer.hpp"
#include "lpdiag/hooks/flash_tensors.hpp"
#include "lpdiag/hooks/monitor.hpp"
#include "lpdiag/hooks/observer.hpp"
#include "test_seed.hpp"

using lpdiag::hooks::attention;
using lpdiag::hooks::Monitor;

namespace {
std::string tmp(const std::string& n) { return lpdiag_test::temp_path("hooks", n); }
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("the op's gradients match the fp64 reference (fp32 policy, fp32 inputs)", "[hooks]") {
  torch::manual_seed(lpdiag_test::seed("test_hooks#4", 1031679u));
  const int64_t B = 2, H = 2, N = 37, d = 16;
  auto q = torch::randn({B, H, N, d}).requires_grad_(true), k = torch::randn({B, H, N, d}).requires_grad_(true),
       v = torch::randn({B, H, N, d}).requires_grad_(true);
  auto g = torch::randn({B, H, N, d});
  torch::Tensor o = attention(q, k, v, true, "fp32", "none", "full", -1);
  o.backward(g);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      auto as_d = [&](const torch::Tensor& t) {
        torch::Tensor x = t.detach()[b][h].to(torch::kFloat64).contiguous();
        return std::vector<double>(x.data_ptr<double>(), x.data_ptr<double>() + x.numel());
      };
      const auto qd = as_d(q), kd = as_d(k), vd = as_d(v), gd = as_d(g);
      const auto ref = lpdiag::reference_attention(qd.data(), kd.data(), vd.data(), gd.data(), N, d, 0.25, true);
      const auto od = as_d(o), dq = as_d(q.grad()), dk = as_d(k.grad()), dv = as_d(v.grad());
      // fp32 arithmetic on O(1) values over <= 37 x 16 terms: 1e-4 is ~100x the rounding.
      for (std::size_t x = 0; x < od.size(); ++x) {
        REQUIRE(std::fabs(od[x] - ref.o[x]) < 1e-4);
        REQUIRE(std::fabs(dq[x] - ref.dq[x]) < 1e-4);
        REQUIRE(std::fabs(dk[x] - ref.dk[x]) < 1e-4);
        REQUIRE(std::fabs(dv[x] - ref.dv[x]) < 1e-4);
      }
    }
}

TEST_CASE("the op in bf16 returns bf16 and its counters reach the sink", "[hooks]") {
  lpdiag::hooks::CounterSink::instance().drain();
  auto q = torch::randn({1, 3, 20, 8}).to(torch::kBFloat16), k = torch::randn({1, 3, 20, 8}).to(torch::kBFloat16),
       v = torch::randn({1, 3, 20, 8}).to(torch::kBFloat16);
  torch::Tensor o = attention(q, k, v, false, "fa2", "paper:beta=3", "counters", 4);
  CHECK(o.scalar_type() == torch::kBFloat16);
  const auto got = lpdiag::hooks::CounterSink::instance().drain();
  REQUIRE(got.count(4) == 1);
  REQUIRE(got.at(4).size() == 3);
  CHECK(got.at(4)[0].rows == 20);
}

TEST_CASE("wrong shapes, dtypes and arguments give messages that name the argument", "[hooks]") {
  auto q = torch::randn({1, 2, 8, 4}).to(torch::kBFloat16);
  CHECK(message_of([&] { attention(q, torch::randn({1, 2, 8}).to(torch::kBFloat16), q, false, "fa2", "none", "counters", -1); })
            .find("k must have shape (B, H, N, d)") != std::string::npos);
  CHECK(message_of([&] { attention(q, q, torch::randn({1, 2, 8, 4}, torch::kFloat64), false, "fa2", "none", "counters", -1); })
            .find("v must be bfloat16") != std::string::npos);
  CHECK(message_of([&] { attention(q, q, q, false, "fa3", "none", "counters", -1); }).find("unknown attention policy 'fa3'") !=
        std::string::npos);
  CHECK(message_of([&] { attention(q, q, q, false, "fa2", "none", "loud", -1); }).find("level must be off, counters or full") != std::string::npos);
}

TEST_CASE("Monitor: unwritable path fails at construction", "[hooks][monitor]") {
  CHECK(message_of([] { Monitor m("/nonexistent-dir/run.h5", 1, 1, 8, "{}", 0, 1); }).find("cannot write the trace") != std::string::npos);
  CHECK(message_of([] { Monitor m(tmp("r.h5"), 1, 1, 8, "{}", 3, 2); }).find("rank 3") != std::string::npos);
}

TEST_CASE("Monitor: the path as given; a directory and an existing trace refused unless overwrite", "[hooks][monitor]") {
  namespace fs = std::filesystem;
  // No ".h5" is added to a path without it.
  const std::string plain = tmp("runnoext");
  fs::remove(plain);
  {
    auto m = c10::make_intrusive<Monitor>(plain, 1, 1, 8, "{}", 0, 1);
    CHECK(m->trace_path() == plain);
    m->record(0, 1.0, 0.0, 0.0);
    m->close();
  }
  CHECK(fs::exists(plain));
  CHECK_FALSE(fs::exists(plain + ".h5"));
  // A directory, with or without a trailing slash, is refused; nothing is written beside it.
  const std::string dir = tmp("adir");
  fs::create_directories(dir);
  CHECK(message_of([&] { Monitor m(dir, 1, 1, 8, "{}", 0, 1); }).find("is a directory") != std::string::npos);
  CHECK(message_of([&] { Monitor m(dir + "/", 1, 1, 8, "{}", 0, 1); }).find("is a directory") != std::string::npos);
  CHECK_FALSE(fs::exists(dir + ".h5"));
  // An existing trace is refused and stays whole; overwrite=true replaces it.
  const std::string old = tmp("existing.h5");
  fs::remove(old);
  {
    auto m = c10::make_intrusive<Monitor>(old, 1, 1, 8, "{}", 0, 1);
    for (int s = 0; s < 30; ++s) m->record(s, 1.0, 0.0, 0.0);
    m->close();
  }
  CHECK(message_of([&] { Monitor m(old, 1, 1, 8, "{}", 0, 1); }).find("already exists") != std::string::npos);
  CHECK(lpdiag::TraceReader(old).records() == 30);
  {
    auto m = c10::make_intrusive<Monitor>(old, 1, 1, 8, "{}", 0, 1, /*overwrite=*/true);
    m->record(0, 1.0, 0.0, 0.0);
    m->close();
  }
  CHECK(lpdiag::TraceReader(old).records() == 1);
}

TEST_CASE("Monitor: a step recorded again is skipped, not fatal, and said as an event", "[hooks][monitor]") {
  const std::string path = tmp("repeat.h5");
  std::filesystem::remove(path);
  auto m = c10::make_intrusive<Monitor>(path, 1, 1, 8, "{}", 0, 1);
  CHECK(m->record(0, 1.0, 0.0, 0.0));
  CHECK(m->record(1, 1.0, 0.0, 0.0));
  CHECK_NOTHROW(m->record(1, 2.0, 0.0, 0.0));  // a gradient-accumulation loop's second micro-batch
  CHECK_NOTHROW(m->record(0, 2.0, 0.0, 0.0));
  CHECK(m->record(2, 1.0, 0.0, 0.0));
  m->close();
  const lpdiag::TraceReader r(path);
  CHECK(r.records() == 3);
  int events = 0;
  for (const auto& e : r.events()) events += e.kind == "step_not_increasing";
  CHECK(events == 1);  // said once
}

TEST_CASE("Monitor: set_flush_every on a live trace takes effect", "[hooks][monitor]") {
  const std::string path = tmp("flush-live.h5");
  std::filesystem::remove(path);
  auto m = c10::make_intrusive<Monitor>(path, 1, 1, 8, "{}", 0, 1);
  m->set_flush_every(1000);
  m->record(0, 1.0, 0.0, 0.0);  // the writer opens here, flushing every 1000 records
  m->set_flush_every(1);        // ignored before: the writer kept 1000
  m->record(1, 1.0, 0.0, 0.0);
  // Flushed without waiting for 1000. The Monitor's flushes are written on the writer's own
  // thread, so the rows land shortly after record() returns: wait up to 10 s for them.
  std::int64_t seen = 0;
  for (int i = 0; i < 1000 && seen < 2; ++i) {
    seen = lpdiag::TraceReader(path).records();
    if (seen < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(seen == 2);
  m->close();
}

TEST_CASE("CaptureBoard: each Monitor's session has its own step and its own finished captures", "[hooks][monitor]") {
  using lpdiag::hooks::CaptureBoard;
  using lpdiag::hooks::CaptureRequest;
  auto& b = CaptureBoard::instance();
  const std::int64_t s1 = lpdiag::hooks::kSessionLayers * 7, s2 = lpdiag::hooks::kSessionLayers * 9;  // no Monitor holds these
  b.set_step(s1, 5);
  b.set_step(s2, 0);
  b.request({s2, 0, "capture-b.h5"});
  CaptureRequest r;
  CHECK(b.take(s2, r));  // due at its own session's step 0, whatever the other session's step (one global step dropped it)
  CHECK(r.path == "capture-b.h5");
  b.done(s1 + 1, "a.h5");
  b.done(s2 + 1, "b.h5");
  CHECK(b.drain_done(s2) == std::vector<std::string>{"b.h5"});  // not the other Monitor's capture
  CHECK(b.drain_done(s1) == std::vector<std::string>{"a.h5"});
  b.forget(s1);
  b.forget(s2);
}

TEST_CASE("Monitor: a path another writer is recording is refused at construction and left whole", "[hooks][monitor]") {
  const std::string path = lpdiag_test::temp_path("hooks", "live-other.h5");
  std::filesystem::remove(path);
  lpdiag::TraceLayout L;
  L.scalars = {"loss", "lr", "grad_norm"};
  lpdiag::TraceWriterOptions o;
  o.flush_every = 1;
  {
    lpdiag::TraceWriter other(path, L, {}, o);
    lpdiag::TraceRecord r = lpdiag::TraceRecord::unmeasured(L, 3);
    r.scalars = {1.0, 2.0, 3.0};
    other.append(r);
    other.flush();
    try {
      lpdiag::hooks::Monitor m(path, 1, 1, 8, "{}", 0, 1);
      FAIL("the Monitor accepted a path another writer holds");
    } catch (const c10::Error& e) {
      CHECK(std::string(e.what()).find("another writer") != std::string::npos);
    }
  }
  const lpdiag::TraceReader r(path);
  CHECK(r.records() == 1);
  CHECK(r.steps(0, 1)[0] == 3);
}

TEST_CASE("Monitor records weights, updates, attention, NaN events, and writes captures on demand", "[hooks][monitor]") {
  lpdiag::hooks::CounterSink::instance().drain();
  const int64_t H = 2, d = 8, C = H * d;
  // Noise plus one planted direction per head of W_Q, 8 and 4 strong: sigma_1 / sigma_2 >= 1.5
  // for W_Q and for each head slice, so power iteration has a gap to converge on (on a pure
  // gaussian 16 x 16 the gap is sometimes under 2% and no fixed iteration count suffices).
  torch::Tensor w0 = 0.2 * torch::randn({3 * C, C});
  for (int64_t h = 0; h < H; ++h) {
    const torch::Tensor a = torch::nn::functional::normalize(torch::randn({d, 1}), torch::nn::functional::NormalizeFuncOptions().dim(0));
    const torch::Tensor b = torch::nn::functional::normalize(torch::randn({1, C}), torch::nn::functional::NormalizeFuncOptions().dim(1));
    w0.narrow(0, h * d, d) += (h == 0 ? 8.0 : 4.0) * torch::matmul(a, b);
  }
  auto w = w0.clone().requires_grad_(true);
  auto mon = c10::make_intrusive<Monitor>(tmp("mon.h5"), 1, H, d, R"({"test":1})", 0, 1);
  // A head-less matrix of the same shape registered first: its batch puts q and k first. It too
  // has a planted direction (sigma_1 / sigma_2 >= 1.5).
  const torch::Tensor wo =
      0.2 * torch::randn({C, C}) +
      6.0 * torch::matmul(torch::nn::functional::normalize(torch::randn({C, 1}), torch::nn::functional::NormalizeFuncOptions().dim(0)),
                          torch::nn::functional::normalize(torch::randn({1, C}), torch::nn::functional::NormalizeFuncOptions().dim(1)));
  mon->add_matrix("blk0.o", "attn_o", 0, 0, wo, 0, C);
  mon->add_fused_qkv("blk0", 0, w);
  mon->add_activation("blk0.attn_out", 0);
  mon->set_cadence("weights", 1), mon->set_cadence("updates", 1);  // every step here (the default is every 10th)
  mon->set_stop_on_nan(true);
  mon->request_capture(0, 2);
  std::vector<double> want_max, want_rms;  // of the attention output, from the same values in fp64
  bool keep = true;
  torch::Tensor q_step2;
  for (int64_t step = 0; step < 5 && keep; ++step) {
    auto x = torch::randn({2, 12, C});
    auto qkv = torch::matmul(x, w.t()).split(C, 2);
    auto heads = [&](const torch::Tensor& t) { return t.view({2, 12, H, d}).transpose(1, 2).to(torch::kBFloat16); };
    // The capture was requested for step 2 before step 0: it must hold step 2's inputs.
    if (step == 2) q_step2 = heads(qkv[0]).to(torch::kFloat32).contiguous();
    auto o = attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), true, "fa2", "none", "full", 0);
    if (step != 1) {  // an activation not observed at a step stays unmeasured (NaN)
      mon->observe_activation("blk0.attn_out", o);
      const torch::Tensor o64 = o.detach().to(torch::kFloat64);
      want_max.push_back(o64.abs().max().item<double>());
      want_rms.push_back(o64.pow(2).mean().sqrt().item<double>());
    } else {
      want_max.push_back(NAN), want_rms.push_back(NAN);
    }
    auto loss = o.to(torch::kFloat32).pow(2).mean();
    loss.backward();
    {
      torch::NoGradGuard g;
      w -= 0.1 * w.grad();
      w.grad().zero_();
    }
    keep = mon->record(step, step == 4 ? NAN : loss.item<double>(), 1e-3, 1.0);
  }
  CHECK_FALSE(keep);  // NaN loss with stop_on_nan
  mon->close();
  lpdiag::TraceReader r(mon->trace_path());
  REQUIRE(r.records() == 5);
  CHECK(r.matrices("attn_q").size() == 1);
  const auto hs = r.series("/weights/blk0.q/head_spectral_norm", 0, 5);
  CHECK(hs[0] > 0);
  {
    // The last record saw the final weights: its sigma_1 (warm-started power iteration, 30
    // iterations cold then 1 per record) against an exact SVD of the same rows. With a gap of
    // 1.5 the iteration error is far below fp32's; 1e-4 leaves room for fp32 norms.
    const auto sn = r.series("/weights/blk0.q/spectral_norm", 0, 5);
    const auto hsn = r.series("/weights/blk0.q/head_spectral_norm", 0, 5);
    const torch::Tensor wq = w.detach().narrow(0, 0, C);
    const double exact = std::get<1>(torch::svd(wq))[0].item<double>();
    const double exact_h1 = std::get<1>(torch::svd(wq.narrow(0, d, d)))[0].item<double>();
    INFO("recorded " << sn[4] << " exact " << exact << "; head 1 recorded " << hsn[4 * H + 1] << " exact " << exact_h1);
    const torch::Tensor sv = std::get<1>(torch::svd(wq)), sv1 = std::get<1>(torch::svd(wq.narrow(0, d, d)));
    REQUIRE(sv[1].item<double>() * 1.5 <= exact);  // the planted gap survived training
    REQUIRE(sv1[1].item<double>() * 1.5 <= exact_h1);
    CHECK(std::fabs(sn[4] - exact) <= 1e-4 * exact);
    CHECK(std::fabs(hsn[4 * H + 1] - exact_h1) <= 1e-4 * exact_h1);
    // The head-less matrix, which sits behind q and k in its batch's record fields.
    const double exact_o = std::get<1>(torch::svd(wo))[0].item<double>();
    const auto so = r.series("/weights/blk0.o/spectral_norm", 0, 5);
    CHECK(std::fabs(so[4] - exact_o) <= 1e-4 * exact_o);
  }
  {
    // Activation statistics are fp32 on the device: max |x| is exact, the rms agrees with the
    // fp64 value to fp32 rounding of a 384-element mean (relative 1e-6).
    const auto amax = r.series("/activations/blk0.attn_out/max_abs", 0, 5);
    const auto arms = r.series("/activations/blk0.attn_out/rms", 0, 5);
    for (int64_t s = 0; s < 5; ++s) {
      INFO("step " << s << ": max " << amax[s] << " want " << want_max[s] << ", rms " << arms[s] << " want " << want_rms[s]);
      if (std::isnan(want_max[s])) {
        CHECK((std::isnan(amax[s]) && std::isnan(arms[s])));
        continue;
      }
      CHECK(amax[s] == static_cast<double>(static_cast<float>(want_max[s])));
      CHECK(std::fabs(arms[s] - want_rms[s]) <= 1e-6 * want_rms[s]);
    }
  }
  const auto sim = r.series("/updates/blk0.q/similarity_prev", 0, 5);
  CHECK(std::isnan(sim[0]));  // no previous record yet
  CHECK(sim[2] >= 0);
  const auto att = r.attention(0, 0, 5);
  CHECK(att[0].rows == 24);  // 2 batches x 12 rows for head 0
  CHECK(att[0].delta_err_count == 24);
  bool nan_event = false, capture_event = false;
  std::string capture;
  for (const auto& e : r.events()) {
    nan_event |= e.kind == "nan_inf" && e.step == 4;
    if (e.kind == "capture_written") capture_event = true, capture = e.message;
  }
  CHECK(nan_event);
  REQUIRE(capture_event);
  const lpdiag::AttentionCapture c = lpdiag::read_capture(capture);
  CHECK(c.step == 2);
  CHECK((c.B == 2 && c.H == H && c.N == 12 && c.d == d));
  CHECK(c.causal);
  REQUIRE(q_step2.defined());
  REQUIRE(c.q.size() == static_cast<std::size_t>(q_step2.numel()));
  CHECK(std::equal(c.q.begin(), c.q.end(), q_step2.data_ptr<float>()));  // bit-exact: bf16 values stored as float
}

// The captures a trace's capture_written events name, read back.
std::vector<lpdiag::AttentionCapture> captures_written(const std::string& trace) {
  std::vector<lpdiag::AttentionCapture> out;
  for (const auto& e : lpdiag::TraceReader(trace).events())
    if (e.kind == "capture_written") out.push_back(lpdiag::read_capture(e.message));
  return out;
}

TEST_CASE("Monitor: a resumed run's first step can be captured by number", "[hooks][monitor]") {
  lpdiag::hooks::CounterSink::instance().drain();
  auto mon = c10::make_intrusive<Monitor>(tmp("resumed.h5"), 1, 2, 8, "{}", 0, 1);
  mon->set_start_step(7);
  mon->request_capture(0, 7);  // the very first forward of this process
  auto x = torch::randn({1, 2, 16, 8}).to(torch::kBFloat16);
  const torch::Tensor q7 = x.to(torch::kFloat32).contiguous();
  for (int64_t step = 7; step < 9; ++step) {
    auto q = (step == 7 ? x : torch::randn({1, 2, 16, 8}).to(torch::kBFloat16)).requires_grad_(true);
    attention(q, q, q, false, "fa2", "none", "counters", 0).to(torch::kFloat32).sum().backward();
    mon->record(step, 1.0, 1e-3, 1.0);
  }
  mon->close();
  const auto caps = captures_written(mon->trace_path());
  REQUIRE(caps.size() == 1);
  CHECK(caps[0].step == 7);
  CHECK(torch::equal(torch::from_blob(const_cast<float*>(caps[0].q.data()), {1, 2, 16, 8}, torch::kFloat32), q7));
  auto late = c10::make_intrusive<Monitor>(tmp("resumed-late.h5"), 1, 2, 8, "{}", 0, 1);
  late->record(0, 1.0, 1e-3, 1.0);
  CHECK_THROWS(late->set_start_step(3));  // after the first record
  late->close();
}

// what the op ran is what the capture and the trace record, in the typed spec's
// canonical form, and re-running that recorded spec (as `lpdiag replay --policy recorded --fix
// recorded` does) gives back the recorded O bit for bit (the CPU engine is deterministic).
TEST_CASE("a capture's recorded spec re-runs to the recorded output, bit for bit", "[hooks][monitor][spec]") {
  lpdiag::hooks::CounterSink::instance().drain();
  const unsigned seed = lpdiag_test::seed("test_hooks#5", 1039598u);
  std::printf("seed %u\n", seed);
  torch::manual_seed(seed);
  auto mon = c10::make_intrusive<Monitor>(tmp("spec.h5"), 1, 2, 16, "{}", 0, 1);
  mon->request_capture(0, 0);
  // Integer-valued logits make repeated maxima (the paper fix engages); a random part the rest.
  auto q = (torch::randint(-3, 4, {1, 2, 64, 16}) + 0.1 * torch::randn({1, 2, 64, 16})).to(torch::kBFloat16).requires_grad_(true);
  auto k = torch::randint(-3, 4, {1, 2, 64, 16}).to(torch::kBFloat16).requires_grad_(true);
  auto v = torch::randn({1, 2, 64, 16}).to(torch::kBFloat16).requires_grad_(true);
  attention(q, k, v, true, "seed:tile=32", "paper:beta=3,tol=0.01", "counters", 0).to(torch::kFloat32).sum().backward();
  mon->record(0, 1.0, 1e-3, 1.0);
  mon->close();
  const auto caps = captures_written(mon->trace_path());
  REQUIRE(caps.size() == 1);
  const lpdiag::AttentionCapture& c = caps[0];
  CHECK(c.policy == "seed:tile=32");
  const lpdiag::AttentionSpec spec = lpdiag::parse_attention_spec(c.policy, c.fix, "off", c.causal);
  CHECK(spec.config.tile_k == 32);
  CHECK(spec.config.fix.kind == lpdiag::FixConfig::Kind::paper);
  CHECK(spec.config.fix.beta == 3.0);
  CHECK(spec.config.fix.tol == 0.01);
  const lpdiag::AttentionInputs in{c.q.data(), c.k.data(), c.v.data(), c.dout.data(), c.B, c.H, c.N, c.d};
  lpdiag::AttentionOptions opt;
  opt.backward = false;
  const lpdiag::AttentionRun run = lpdiag::run_attention(spec.config, in, opt);
  REQUIRE(run.o.size() == c.o.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < c.o.size(); ++i) differ += run.o[i] != c.o[i];
  CHECK(differ == 0);
  const lpdiag::TraceReader r(mon->trace_path());
  REQUIRE(r.layout().attention.size() == 1);
  CHECK(r.layout().attention[0].policy == "seed:tile=32");
  CHECK(lpdiag::parse_fix(r.layout().attention[0].fix).beta == 3.0);
}

TEST_CASE("Monitor's capture trigger fires on a repeated-max rate above the threshold", "[hooks][monitor]") {
  lpdiag::hooks::CounterSink::instance().drain();
  auto mon = c10::make_intrusive<Monitor>(tmp("trigger.h5"), 1, 2, 8, "{}", 0, 1);
  mon->set_capture_trigger(0.5, 1);  // at most one capture
  auto k = torch::randn({1, 2, 16, 8}).to(torch::kBFloat16).requires_grad_(true);
  for (int64_t step = 0; step < 4; ++step) {
    // q = 0: every score is 0, so every row's max repeats (rate 1 > 0.5).
    auto q = torch::zeros({1, 2, 16, 8}, torch::kBFloat16).requires_grad_(true);
    attention(q, k, k, false, "fa2", "none", "counters", 0).to(torch::kFloat32).sum().backward();
    mon->record(step, 1.0, 1e-3, 1.0);
  }
  mon->close();
  const auto caps = captures_written(mon->trace_path());
  REQUIRE(caps.size() == 1);
  CHECK(caps[0].step == 1);  // requested at step 0 for the next step
}

TEST_CASE("flash_tensors packs torch tensors into the CUDA entries' arguments", "[hooks][cuda-args]") {
  using namespace lpdiag::hooks;
  namespace lc = lpdiag::cuda;
  // (B, N, H, d) storage seen as (B, H, N, d): the layout GPT-2's heads come in.
  const torch::Tensor q = torch::randn({2, 40, 3, 64}).to(torch::kBFloat16).transpose(1, 2);
  const torch::Tensor k = torch::randn({2, 3, 40, 64}).to(torch::kBFloat16);
  const FlashForwardTensors counted = allocate_forward(q, lc::Instrument::counters);
  CHECK_FALSE(counted.residual.defined());
  const FlashForwardTensors full = allocate_forward(q, lc::Instrument::full);
  REQUIRE(full.residual.defined());
  CHECK(full.residual.sizes() == q.sizes());
  CHECK(full.lse.sizes() == torch::IntArrayRef({2, 3, 40}));
  lpdiag::FixConfig fix = lpdiag::parse_fix("safe");
  auto* counters = reinterpret_cast<lc::DeviceHeadCounters*>(0x1000);
  const lc::FlashForwardArgs f = forward_args(q, k, k, full, true, fix, lc::Instrument::full, counters, nullptr);
  CHECK((f.shape.B == 2 && f.shape.H == 3 && f.shape.N == 40 && f.shape.d == 64 && f.shape.causal));
  CHECK((f.q.ptr == q.data_ptr() && f.q.sb == 40 * 3 * 64 && f.q.sh == 64 && f.q.sn == 3 * 64));
  CHECK((f.k.sb == 3 * 40 * 64 && f.k.sh == 40 * 64 && f.k.sn == 64));
  CHECK((f.o == full.o.data_ptr() && f.lse == full.lse.data_ptr<float>() && f.o_residual == full.residual.data_ptr<float>()));
  // O in q's layout ((B, N, H, d) storage), so the caller's transpose back is free.
  CHECK(full.o.strides() == q.strides());
  CHECK((f.o_strides.sb == 40 * 3 * 64 && f.o_strides.sh == 64 && f.o_strides.sn == 3 * 64));
  CHECK((f.counters == counters && f.fix.kind == lpdiag::FixConfig::Kind::safe && f.instrument == lc::Instrument::full));
  CHECK(forward_args(q, k, k, counted, false, fix, lc::Instrument::counters, counters, nullptr).o_residual == nullptr);
  const FlashBackwardTensors g = allocate_backward(q, k, k);
  // Each gradient in its input's layout: dQ as the transposed q, dK and dV contiguous as k.
  CHECK(g.dq.strides() == q.strides());
  CHECK((g.dk.is_contiguous() && g.dv.is_contiguous()));
  CHECK((g.dq.scalar_type() == torch::kBFloat16 && g.dq_accum.scalar_type() == torch::kFloat32 && g.delta.dim() == 3));
  const lc::FlashBackwardArgs b = backward_args(q, k, k, k, full, g, false, lc::Instrument::off, nullptr, nullptr);
  CHECK((b.o.ptr == full.o.data_ptr() && b.o.sn == 3 * 64 && b.dout.ptr == k.data_ptr()));
  CHECK((b.dq_strides.sh == 64 && b.dq_strides.sn == 3 * 64 && b.dk_strides.sn == 64 && b.dv_strides.sh == 40 * 64));
  CHECK((b.lse == full.lse.data_ptr<float>() && b.o_residual == full.residual.data_ptr<float>()));
  CHECK((b.dq == g.dq.data_ptr() && b.dq_accum == g.dq_accum.data_ptr<float>() && b.delta == g.delta.data_ptr<float>()));
  CHECK((!b.shape.causal && b.instrument == lc::Instrument::off));
}

TEST_CASE("Monitor's weight statistics belong to the step they were recorded at", "[hooks][monitor]") {
  // On CUDA the statistics of step s run on a side stream and land at record(s + 1); the weights
  // change right after record(s) returns, as an optimizer would. From the third record on they
  // are a replayed CUDA graph, recaptured after the weight moves to new storage. Each record must
  // still hold the statistics of the weights as they were at its own step. Runs on the CPU (in
  // line) always, and on CUDA where a device is visible, with and without the graphs.
  // Tolerances: a planted direction gives W a gap of ~2 and each update (rank one along a fixed
  // direction plus noise) a gap of ~4, so the warm iterations per record (1 for W, 2 for the
  // update, whose direction is fresh noise each time) track sigma_1 of both to
  // well under 1e-4 (fp32 norms); the updates' top pairs, warm-started from the last update's,
  // make the similarity of consecutive pairs agree with the SVD's to 1e-3.
  std::vector<std::pair<torch::Device, bool>> runs{{torch::kCPU, false}};
  if (torch::cuda::is_available()) runs.push_back({torch::Device(torch::kCUDA, 0), true}), runs.push_back({torch::Device(torch::kCUDA, 0), false});
  auto unit = [](int64_t n, int64_t dim) {
    return torch::nn::functional::normalize(torch::randn({dim == 0 ? n : 1, dim == 0 ? 1 : n}),
                                            torch::nn::functional::NormalizeFuncOptions().dim(dim));
  };
  for (const auto& [dev, graphs] : runs) {
    INFO("device " << dev.str() << (graphs ? ", CUDA graphs" : ""));
    const int64_t C = 16, steps = 7;
    const torch::Tensor a = unit(C, 0), b = unit(C, 1), a2 = unit(C, 0), b2 = unit(C, 1);
    torch::Tensor w = (0.2 * torch::randn({C, C}) + 8.0 * torch::matmul(a, b)).to(dev);
    auto mon = c10::make_intrusive<Monitor>(tmp("steps-" + dev.str() + (graphs ? "-graphs" : "") + ".h5"), 1, 2, 8, "{}", 0, 1);
    mon->set_cuda_graphs(graphs);
    mon->add_matrix("m", "mlp_in", 0, 0, w, 0, C);
    mon->set_cadence("weights", 1), mon->set_cadence("updates", 1);
    std::vector<double> exact, exact_update, exact_conc, exact_sim;
    torch::Tensor before, prev_u, prev_v;
    for (int64_t s = 0; s < steps; ++s) {
      const torch::Tensor now = w.cpu().to(torch::kFloat64);
      exact.push_back(std::get<1>(torch::svd(now))[0].item<double>());
      if (before.defined()) {
        const torch::Tensor d = now - before;
        const auto [U, S, V] = torch::svd(d);
        const double s1 = S[0].item<double>();
        exact_update.push_back(s1), exact_conc.push_back(s1 * s1 / d.pow(2).sum().item<double>());
        const torch::Tensor u = U.select(1, 0), v = V.select(1, 0);
        exact_sim.push_back(prev_u.defined() ? (u.dot(prev_u).abs() * v.dot(prev_v).abs()).item<double>() : NAN);
        prev_u = u, prev_v = v;
      } else {
        exact_update.push_back(NAN), exact_conc.push_back(NAN), exact_sim.push_back(NAN);
      }
      before = now;
      REQUIRE(mon->record(s, 1.0, 1e-3, 1.0));
      torch::NoGradGuard g;
      // Queued right behind the record's statistics; moves sigma_1 by ~0.3 of 8.
      w.add_((0.3 * torch::matmul(a2, b2) + 0.01 * torch::randn({C, C})).to(dev));
      if (s == 2) w.set_data(w.detach().clone());  // new storage, as model.to(...) does: the Monitor must follow it
    }
    mon->close();
    lpdiag::TraceReader r(mon->trace_path());
    REQUIRE(r.records() == steps);
    const auto sn = r.series("/weights/m/spectral_norm", 0, steps);
    const auto s1 = r.series("/updates/m/sigma1", 0, steps), conc = r.series("/updates/m/concentration", 0, steps);
    const auto sim = r.series("/updates/m/similarity_prev", 0, steps);
    for (int64_t s = 0; s < steps; ++s) {
      INFO("step " << s << ": sigma " << sn[s] << " (exact " << exact[s] << "), update sigma " << s1[s] << " (exact "
                   << exact_update[s] << "), concentration " << conc[s] << " (exact " << exact_conc[s] << "), similarity " << sim[s] << " (exact " << exact_sim[s] << ")");
      CHECK(std::fabs(sn[s] - exact[s]) <= 1e-4 * exact[s]);
      if (s == 0) continue;
      CHECK(std::fabs(s1[s] - exact_update[s]) <= 1e-4 * exact_update[s]);
      CHECK(std::fabs(conc[s] - exact_conc[s]) <= 1e-4);
      if (s >= 2) CHECK(std::fabs(sim[s] - exact_sim[s]) <= 1e-3);
    }
  }
}

TEST_CASE("Monitor's loss, gradient norm and counters left on the device belong to their step", "[hooks][monitor]") {
  // On CUDA record() takes the loss, the gradient norm and the op's counters without waiting:
  // they land with the statistics at the next record(). Each record must still hold its own
  // step's values, and a non-finite loss its event at its own step, with training going on
  // (stop_on_nan off). A capture trigger fires when the counters land: on the CPU for the next
  // step, on CUDA one step later. Runs on the CPU (in line) always, and on CUDA where a device is
  // visible.
  std::vector<torch::Device> devices{torch::kCPU};
  if (torch::cuda::is_available()) devices.emplace_back(torch::kCUDA, 0);
  for (const auto& dev : devices) {
    INFO("device " << dev.str());
    lpdiag::hooks::CounterSink::instance().drain();
    const int64_t H = 2, N = 16, d = 64, steps = 6, nan_step = 4, tie_step = 3;
    torch::Tensor w = torch::randn({3 * H * d, H * d}).to(dev);
    auto mon = c10::make_intrusive<Monitor>(tmp("deferred-" + std::string(dev.is_cuda() ? "cuda" : "cpu") + ".h5"), 1, H, d, "{}", 0, 1);
    mon->add_fused_qkv("blk0", 0, w);
    mon->set_capture_trigger(0.5, 1);
    const auto bf16 = torch::TensorOptions().dtype(torch::kBFloat16).device(dev);
    for (int64_t s = 0; s < steps; ++s) {
      // q = 0 at tie_step: every score of every row is 0, so every row's maximum repeats.
      const torch::Tensor q = (s == tie_step ? torch::zeros({1, H, N, d}, bf16) : torch::randn({1, H, N, d}, bf16)).requires_grad_(true);
      const torch::Tensor k = torch::randn({1, H, N, d}, bf16).requires_grad_(true);
      const torch::Tensor v = torch::randn({1, H, N, d}, bf16).requires_grad_(true);
      attention(q, k, v, false, "fa2", "none", "counters", 0).to(torch::kFloat32).sum().backward();  // a capture is written here
      const torch::Tensor loss = torch::full({}, s == nan_step ? NAN : 1.0 + double(s), torch::TensorOptions().device(dev));
      const torch::Tensor grad_norm = torch::full({}, 0.25 * double(s), torch::TensorOptions().device(dev));
      REQUIRE(mon->record(s, loss, 1e-3, grad_norm));
    }
    mon->close();
    lpdiag::TraceReader r(mon->trace_path());
    REQUIRE(r.records() == steps);
    const auto loss = r.series("/scalars/loss", 0, steps), gn = r.series("/scalars/grad_norm", 0, steps);
    const auto all = r.attention(0, 0, steps);  // steps x H, row-major
    for (int64_t s = 0; s < steps; ++s) {
      const auto& c = all[static_cast<std::size_t>(s * H + 1)];  // head 1
      INFO("step " << s << ": loss " << loss[s] << " grad_norm " << gn[s] << " repeated-max rows " << c.repeated_max_rows);
      if (s == nan_step) CHECK(std::isnan(loss[s]));
      else CHECK(loss[s] == 1.0 + double(s));  // exact: small integers in fp32
      CHECK(gn[s] == 0.25 * double(s));
      CHECK(c.rows == N);
      // Random bf16 scores rarely tie at a row's maximum; all 16 rows tying marks tie_step.
      if (s == tie_step) CHECK(c.repeated_max_rows == N);
      else CHECK(c.repeated_max_rows < N);
    }
    int nan_events = 0;
    std::vector<int64_t> captured;
    for (const auto& e : r.events()) {
      nan_events += e.kind == "nan_inf" && e.step == nan_step;
      if (e.kind == "capture_written") captured.push_back(lpdiag::read_capture(e.message).step);
    }
    CHECK(nan_events == 1);
    REQUIRE(captured.size() == 1);
    CHECK(captured[0] == tie_step + (dev.is_cuda() ? 2 : 1));
  }
}

TEST_CASE("Monitors hold sessions: distinct layer ids while alive, the first free one reused", "[hooks][monitor]") {
  using lpdiag::hooks::Monitor;
  const std::int64_t stride = lpdiag::hooks::kSessionLayers;
  std::int64_t first = -1;
  {
    auto a = c10::make_intrusive<Monitor>(tmp("session-a.h5"), 1, 2, 8, "{}", 0, 1);
    auto b = c10::make_intrusive<Monitor>(tmp("session-b.h5"), 1, 2, 8, "{}", 0, 1);
    first = a->layer_base();
    CHECK(b->layer_base() != a->layer_base());
    CHECK(a->layer_base() % stride == 0);
    CHECK(b->layer_base() % stride == 0);
    // A constructor that fails holds no session.
    CHECK_THROWS(c10::make_intrusive<Monitor>("/nonexistent-dir/x.h5", 1, 2, 8, "{}", 0, 1));
    a->close();
    auto c = c10::make_intrusive<Monitor>(tmp("session-c.h5"), 1, 2, 8, "{}", 0, 1);
    CHECK(c->layer_base() == first);  // a's session, released by close()
  }
  auto d = c10::make_intrusive<Monitor>(tmp("session-d.h5"), 1, 2, 8, "{}", 0, 1);
  CHECK(d->layer_base() == first);
}

TEST_CASE("observe_call: a kernel's output and gradients pass through; its counters reach the sink", "[hooks][observe]") {
  // A user's attention in plain LibTorch (fp32 math, O rounded to bf16), observed from C++ as
  // gpt2_train observes PyTorch's SDPA: the output is the same tensor, the gradients of q, k, v
  // are those of the unobserved call bit for bit, and rows, O errors and (from dO) delta errors
  // reach the counter sink under the given layer id.
  torch::manual_seed(lpdiag_test::seed("test_hooks#observe", 20261206u));
  auto kernel = [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    const auto s = torch::matmul(q.to(torch::kFloat32), k.to(torch::kFloat32).transpose(-1, -2)) / std::sqrt(double(q.size(3)));
    const auto mask = torch::ones({q.size(2), q.size(2)}, torch::kBool).triu(1);
    return torch::matmul(torch::softmax(s.masked_fill(mask, -INFINITY), -1), v.to(torch::kFloat32)).to(torch::kBFloat16);
  };
  const auto base = torch::randn({2, 3, 16, 8}).to(torch::kBFloat16);
  const auto kv = torch::randn({2, 3, 16, 8}).to(torch::kBFloat16);
  const auto g = torch::randn({2, 3, 16, 8}).to(torch::kBFloat16);
  auto run = [&](bool observe) {
    auto q = base.clone().requires_grad_(true), k = kv.clone().requires_grad_(true), v = (kv * 0.5).requires_grad_(true);
    torch::Tensor o = kernel(q, k, v);
    if (observe) lpdiag::hooks::observe_call(q, k, v, o, true, 0.0, 7, "math", 0);
    o.backward(g);
    return std::vector<torch::Tensor>{o.detach(), q.grad(), k.grad(), v.grad()};
  };
  lpdiag::hooks::CounterSink::instance().drain();
  const auto plain = run(false);
  const auto seen = run(true);
  for (std::size_t i = 0; i < plain.size(); ++i) CHECK(torch::equal(plain[i], seen[i]));
  const auto got = lpdiag::hooks::CounterSink::instance().drain();
  REQUIRE(got.count(7) == 1);
  REQUIRE(got.at(7).size() == 3);
  CHECK(got.at(7)[0].rows == 2 * 16);
  CHECK(got.at(7)[0].o_err_count == 2 * 16 * 8);
  CHECK(got.at(7)[0].delta_err_count == 2 * 16);
  lpdiag::hooks::CounterSink::Spec spec;
  REQUIRE(lpdiag::hooks::CounterSink::instance().reported_spec(7, spec));
  CHECK(spec.policy == "external:math");
  CHECK(spec.json.find("\"observed\":true") != std::string::npos);
  // A call the observer cannot take is skipped and counted, the output untouched.
  const auto before = lpdiag::hooks::observer_skips();
  auto q = base.clone();
  lpdiag::hooks::observe_call(q, kv.narrow(2, 0, 8), kv.narrow(2, 0, 8), kernel(q, q, q), true, 0.0, 7, "math", 0);
  const auto after = lpdiag::hooks::observer_skips();
  std::int64_t added = 0;
  for (const auto& [why, n] : after) added += n - (before.count(why) ? before.at(why) : 0);
  CHECK(added == 1);
}
