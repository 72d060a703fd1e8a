// bench/attention (GPU): lpdiag's CUDA fa2 kernels at instrumentation off / counters / full
// against PyTorch SDPA's flash and cuDNN backends through LibTorch, in one run.
//   bench_attention [--reps N] [--json FILE]   TFLOP/s table (FLOPs = 4 B H N^2 d, x0.5 causal,
//                                              backward 2.5x forward)
//   bench_attention --check                    gradient errors against an fp64 reference, ours
//                                              against SDPA flash's (exit 1 above 1.5x)
//   bench_attention --require-targets          also exit 1 when a speed target of the CUDA
//                                              kernels issue is missed (attention_targets.hpp)
// Exits 77 when no GPU is visible.
#include <ATen/Context.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "lpdiag/cuda/cuda_check.hpp"
#include "lpdiag/cuda/device.hpp"
#include "lpdiag/cuda/flash_attention.hpp"
#include "lpdiag/hooks/flash_tensors.hpp"

#include "attention_targets.hpp"

namespace lc = lpdiag::cuda;

namespace {

struct Shape {
  std::int64_t B, H, N, d;
  bool causal;
  std::string name() const {
    return "B" + std::to_string(B) + " H" + std::to_string(H) + " N" + std::to_string(N) + " d" + std::to_string(d) +
           (causal ? " causal" : " non-causal");
  }
  double fwd_flops() const { return 4.0 * B * H * double(N) * N * d * (causal ? 0.5 : 1.0); }
};

cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

// Median of `reps` timings (ms) of f, after warm-up, with CUDA events on the current stream.
double median_ms(int reps, const std::function<void()>& f) {
  for (int w = 0; w < 3; ++w) f();
  cudaEvent_t a, b;
  LPDIAG_CUDA_CHECK(cudaEventCreate(&a));
  LPDIAG_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) {
    LPDIAG_CUDA_CHECK(cudaEventRecord(a, stream()));
    f();
    LPDIAG_CUDA_CHECK(cudaEventRecord(b, stream()));
    LPDIAG_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    LPDIAG_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Our kernels on (B, H, N, d) bf16 CUDA tensors, buffers allocated once so the timings hold
// only the kernels; keeps O, lse and the residual for the backward.
int g_bwd_key_block = 0;  // --bwd-keys: the backward's keys per block (FlashBackwardArgs::key_block)
std::optional<lc::Instrument> g_level;  // --level: time only this level of ours (for the profiler)
std::vector<std::string> g_fixes = {"none"};  // --fixes: one set of our rows per fix (e.g. none,sr: the sr fix's cost)

struct Ours {
  Shape s;
  lc::Instrument level;
  lpdiag::FixConfig fix;
  lpdiag::hooks::FlashForwardTensors f;
  lpdiag::hooks::FlashBackwardTensors b;
  torch::Tensor counters;
  Ours(const Shape& sh, lc::Instrument l, const torch::Tensor& like)
      : s(sh), level(l), f(lpdiag::hooks::allocate_forward(like, l)), b(lpdiag::hooks::allocate_backward(like, like, like)) {
    counters = torch::zeros({s.H * static_cast<std::int64_t>(sizeof(lc::DeviceHeadCounters))}, like.options().dtype(torch::kUInt8));
  }
  lc::DeviceHeadCounters* cnt() { return reinterpret_cast<lc::DeviceHeadCounters*>(counters.data_ptr()); }
  void forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    lc::flash_forward(lpdiag::hooks::forward_args(q, k, v, f, s.causal, fix, level, cnt(), stream()));
  }
  void backward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& g) {
    lc::FlashBackwardArgs a = lpdiag::hooks::backward_args(q, k, v, g, f, b, s.causal, level, cnt(), stream());
    a.key_block = g_bwd_key_block;
    lc::flash_backward(a);
  }
};

void use_backend(const std::string& b) {
  auto& ctx = at::globalContext();
  ctx.setSDPUseFlash(b == "flash");
  ctx.setSDPUseMemEfficient(false);
  ctx.setSDPUseMath(b == "math");
  ctx.setSDPUseCuDNN(b == "cudnn");
}

struct Row {
  std::string shape, impl;
  double fwd_ms, bwd_ms, fwd_tflops, bwd_tflops, total_tflops;
};

std::vector<Row> time_shape(const Shape& s, int reps, bool ours_only) {
  auto opt = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  torch::Tensor q = torch::randn({s.B, s.H, s.N, s.d}, opt), k = torch::randn({s.B, s.H, s.N, s.d}, opt),
                v = torch::randn({s.B, s.H, s.N, s.d}, opt), g = torch::randn({s.B, s.H, s.N, s.d}, opt);
  std::vector<Row> rows;
  auto add = [&](const std::string& impl, double f, double b) {
    const double ff = s.fwd_flops(), bf = 2.5 * ff;
    rows.push_back({s.name(), impl, f, b, ff / f / 1e9, bf / b / 1e9, (ff + bf) / (f + b) / 1e9});
  };
  for (const std::string& fix : g_fixes)
    for (auto [name, level] : {std::pair{"lpdiag off", lc::Instrument::off}, std::pair{"lpdiag counters", lc::Instrument::counters},
                               std::pair{"lpdiag full", lc::Instrument::full}}) {
      if (g_level && *g_level != level) continue;
      Ours o(s, level, q);
      o.fix = lpdiag::parse_fix(fix);
      const double f = median_ms(reps, [&] { o.forward(q, k, v); });
      const double b = median_ms(reps, [&] { o.backward(q, k, v, g); });
      add(fix == "none" ? std::string(name) : std::string(name) + " fix=" + fix, f, b);
    }
  for (const std::string backend : {"flash", "cudnn"}) {
    if (ours_only) break;
    use_backend(backend);
    try {
      double f;
      {
        torch::NoGradGuard ng;
        f = median_ms(reps, [&] { (void)at::scaled_dot_product_attention(q, k, v, {}, 0.0, s.causal); });
      }
      torch::Tensor qg = q.detach().requires_grad_(true), kg = k.detach().requires_grad_(true), vg = v.detach().requires_grad_(true);
      torch::Tensor out = at::scaled_dot_product_attention(qg, kg, vg, {}, 0.0, s.causal);
      const double b = median_ms(reps, [&] { (void)torch::autograd::grad({out}, {qg, kg, vg}, {g}, /*retain_graph=*/true); });
      add("sdpa " + backend, f, b);
    } catch (const std::exception& e) {
      std::printf("sdpa %s unavailable at %s: %.200s\n", backend.c_str(), s.name().c_str(), e.what());
    }
  }
  use_backend("flash");
  return rows;
}

// ---- --check: gradient errors against fp64 ----

torch::Tensor reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal) {
  const auto N = q.size(2);
  torch::Tensor s = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(3)));
  if (causal) s = s.masked_fill(torch::ones({N, N}, q.options().dtype(torch::kBool)).triu(1), -INFINITY);
  return torch::matmul(torch::softmax(s, -1), v);
}

double rel(const torch::Tensor& a, const torch::Tensor& ref) {
  return (a.to(torch::kFloat64) - ref).norm().item<double>() / ref.norm().item<double>();
}

int check(const std::string& json_path) {
  int bad = 0;
  nlohmann::json json = nlohmann::json::array();
  auto opt = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  for (std::int64_t d : {64, 128})
    for (bool causal : {false, true})
      for (const std::string input : {"gaussian", "adversarial"}) {
        const Shape s{2, 4, 777, d, causal};
        torch::Tensor q = torch::randn({s.B, s.H, s.N, d}, opt), k = torch::randn({s.B, s.H, s.N, d}, opt),
                      v = torch::randn({s.B, s.H, s.N, d}, opt), g = torch::randn({s.B, s.H, s.N, d}, opt);
        if (input == "adversarial") {
          // A duplicated max key (a sink) scoring 8 above the rest, sign-skewed V and dO.
          const double a = std::sqrt(8.0 * std::sqrt(double(d)));
          q = (q * 0.05).index_put_({"...", 0}, a);
          k = (k * 0.05).index_put_({"...", 0}, 0.0);
          k.index_put_({torch::indexing::Slice(), torch::indexing::Slice(), torch::indexing::Slice(0, 2)}, 0.0);
          k.index_put_({torch::indexing::Slice(), torch::indexing::Slice(), torch::indexing::Slice(0, 2), 0}, a);
          v = v.abs() + 1.0;
          g = g.abs();
          q = q.to(torch::kBFloat16), k = k.to(torch::kBFloat16), v = v.to(torch::kBFloat16), g = g.to(torch::kBFloat16);
        }
        torch::Tensor q64 = q.to(torch::kFloat64).requires_grad_(true), k64 = k.to(torch::kFloat64).requires_grad_(true),
                      v64 = v.to(torch::kFloat64).requires_grad_(true);
        torch::Tensor o64 = reference(q64, k64, v64, causal);
        auto ref = torch::autograd::grad({o64}, {q64, k64, v64}, {g.to(torch::kFloat64)});
        Ours ours(s, lc::Instrument::counters, q);
        ours.forward(q, k, v);
        ours.backward(q, k, v, g);
        use_backend("flash");
        torch::Tensor qg = q.detach().requires_grad_(true), kg = k.detach().requires_grad_(true), vg = v.detach().requires_grad_(true);
        torch::Tensor of = at::scaled_dot_product_attention(qg, kg, vg, {}, 0.0, causal);
        auto fl = torch::autograd::grad({of}, {qg, kg, vg}, {g});
        const double eo[4] = {rel(ours.f.o, o64.detach()), rel(ours.b.dq, ref[0]), rel(ours.b.dk, ref[1]), rel(ours.b.dv, ref[2])};
        const double ef[4] = {rel(of, o64.detach()), rel(fl[0], ref[0]), rel(fl[1], ref[1]), rel(fl[2], ref[2])};
        const char* names[4] = {"O", "dQ", "dK", "dV"};
        {
          // The same inputs in (B, N, H, d) storage seen as (B, H, N, d), as nanoGPT makes them:
          // read in place, O and the gradients written in that layout, O, dK and dV identical to
          // the contiguous run's. dQ is summed with fp32 atomics in an order that varies from run
          // to run (several key blocks add to one row), so it is held to 1e-3 relative L2 (a
          // quarter of a bf16 ulp's 2^-8), not to identity.
          auto bnhd = [](const torch::Tensor& t) { return t.transpose(1, 2).contiguous().transpose(1, 2); };
          const torch::Tensor qv = bnhd(q), kv = bnhd(k), vv = bnhd(v), gv = bnhd(g);
          Ours strided(s, lc::Instrument::counters, qv);
          strided.forward(qv, kv, vv);
          strided.backward(qv, kv, vv, gv);
          const torch::Tensor* a[4] = {&strided.f.o, &strided.b.dq, &strided.b.dk, &strided.b.dv};
          const torch::Tensor* c[4] = {&ours.f.o, &ours.b.dq, &ours.b.dk, &ours.b.dv};
          for (int x = 0; x < 4; ++x) {
            const bool layout = a[x]->strides() == qv.strides();
            const bool same = x == 1 ? rel(*a[x], c[x]->to(torch::kFloat64)) <= 1e-3 : torch::equal(*a[x], *c[x]);
            bad += !(layout && same);
            std::printf("%-34s %-11s %-2s (B,N,H,d) layout: %s, values %s\n", s.name().c_str(), input.c_str(), names[x],
                        layout ? "kept" : "NOT kept (FAIL)",
                        same ? (x == 1 ? "within 1e-3 relative L2" : "identical") : "DIFFER (FAIL)");
          }
        }
        for (int x = 0; x < 4; ++x) {
          // 1.5x the flash error, with a floor of half a bf16 ulp (2^-9 relative) for ties at tiny errors.
          const bool ok = std::isfinite(eo[x]) && eo[x] <= std::max(1.5 * ef[x], 0x1p-9);
          bad += !ok;
          std::printf("%-34s %-11s %-2s ours %.3e  sdpa flash %.3e  ratio %.2f %s\n", s.name().c_str(), input.c_str(),
                      names[x], eo[x], ef[x], eo[x] / ef[x], ok ? "ok" : "FAIL");
          json.push_back({{"shape", s.name()}, {"input", input}, {"tensor", names[x]}, {"ours", eo[x]}, {"sdpa_flash", ef[x]}});
        }
      }
  if (!json_path.empty()) std::ofstream(json_path) << json.dump(1) << "\n";
  std::printf("%s: %d comparisons above 1.5x SDPA flash\n", bad ? "FAILED" : "PASSED", bad);
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (lc::device_count() == 0 || !torch::cuda::is_available()) {
    std::puts("SKIP: no CUDA device visible");
    return 77;
  }
  int reps = 30;
  std::string json_path;
  bool do_check = false, ours_only = false, require_targets = false;
  int only = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--check") do_check = true;
    else if (a == "--reps" && i + 1 < argc) reps = std::stoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--only" && i + 1 < argc) only = std::stoi(argv[++i]);  // one shape (0..5), for the profiler
    else if (a == "--ours-only") ours_only = true;
    else if (a == "--require-targets") require_targets = true;
    else if (a == "--bwd-keys" && i + 1 < argc) g_bwd_key_block = std::stoi(argv[++i]);  // 64 or 128 (0: default)
    else if (a == "--fixes" && i + 1 < argc) {
      g_fixes.clear();
      std::stringstream ss(argv[++i]);
      for (std::string f; std::getline(ss, f, ',');) g_fixes.push_back(f);
    }
    else if (a == "--level" && i + 1 < argc) {
      try {
        g_level = lpdiag::parse_level(argv[++i]);
      } catch (const lpdiag::Error& e) {
        std::fprintf(stderr, "bench_attention: --level: %s\n", e.what());
        return 2;
      }
    }
    else {
      std::fprintf(stderr,
                   "usage: bench_attention [--check] [--reps N] [--json FILE] [--only 0..5] [--ours-only] [--bwd-keys 64|128] "
                   "[--level off|counters|full] [--fixes none,sr] [--require-targets]\n");
      return 2;
    }
  }
  std::printf("device: %s, LibTorch %s\n", lc::device_name().c_str(), TORCH_VERSION);
  torch::manual_seed(static_cast<std::uint64_t>(std::random_device{}()));
  if (do_check) return check(json_path);
  std::vector<Row> all;
  // GPT-2 small (causal and not), d128 at 4k both ways, and d128 causal at 8k and 16k.
  const std::vector<Shape> shapes = {{16, 12, 1024, 64, true}, {16, 12, 1024, 64, false}, {4, 16, 4096, 128, true},
                                     {4, 16, 4096, 128, false}, {2, 16, 8192, 128, true},  {1, 16, 16384, 128, true}};
  for (std::size_t x = 0; x < shapes.size(); ++x) {
    if (only >= 0 && static_cast<std::size_t>(only) != x) continue;
    auto r = time_shape(shapes[x], reps, ours_only);
    all.insert(all.end(), r.begin(), r.end());
  }
  std::printf("\n%-28s %-16s %9s %9s %9s %9s %9s\n", "shape", "impl", "fwd ms", "bwd ms", "fwd TF/s", "bwd TF/s", "f+b TF/s");
  nlohmann::json json = {{"rows", nlohmann::json::array()}, {"targets", nlohmann::json::array()}};
  std::vector<lpdiag::bench::Timing> timings;
  for (const Row& r : all) {
    std::printf("%-28s %-16s %9.3f %9.3f %9.1f %9.1f %9.1f\n", r.shape.c_str(), r.impl.c_str(), r.fwd_ms, r.bwd_ms,
                r.fwd_tflops, r.bwd_tflops, r.total_tflops);
    json["rows"].push_back({{"shape", r.shape}, {"impl", r.impl}, {"fwd_ms", r.fwd_ms}, {"bwd_ms", r.bwd_ms},
                            {"fwd_tflops", r.fwd_tflops}, {"bwd_tflops", r.bwd_tflops}, {"total_tflops", r.total_tflops}});
    timings.push_back({r.shape, r.impl, r.fwd_ms, r.bwd_ms});
  }
  // The targets on fwd+bwd time (attention_targets.hpp): counters >= 1.0x SDPA cuDNN,
  // counters <= +5% and full <= +25% over off; counters vs SDPA flash reported, not gating.
  int missed = 0;
  std::printf("\ntargets (fwd+bwd time)\n");
  for (const auto& c : lpdiag::bench::check_targets(timings)) {
    const char* verdict = c.met ? "met" : c.gating ? "MISSED" : "below (not a target)";
    if (c.ratio())
      std::printf("%-28s %-24s %7.3fx  limit >= %.2fx  %s\n", c.shape.c_str(), c.target.c_str(), c.value, c.limit, verdict);
    else
      std::printf("%-28s %-24s %+6.1f%%  limit <= +%.0f%%  %s\n", c.shape.c_str(), c.target.c_str(), 100 * c.value,
                  100 * c.limit, verdict);
    missed += c.gating && !c.met;
    json["targets"].push_back(
        {{"shape", c.shape}, {"target", c.target}, {"value", c.value}, {"limit", c.limit}, {"met", c.met}, {"gating", c.gating}});
  }
  if (!json_path.empty()) std::ofstream(json_path) << json.dump(1) << "\n";
  return require_targets && missed > 0 ? 1 : 0;
}
