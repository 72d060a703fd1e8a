// What one Monitor record costs, piece by piece, at GPT-2 small's shapes, each against a memory
// pass over the same bytes measured in the same run:
//   - observe_activation on one block output, against one reading pass (x.sum());
//   - record() with weight and update statistics due, against one copy of the tracked weights;
//   - record() with nothing but the scalars due;
//   - the host time record() takes before it returns (what a host-bound loop pays).
//   bench_monitor_costs [--device cuda] [--reps 30] [--json FILE]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "lpdiag/hooks/monitor.hpp"

namespace {
using clk = std::chrono::steady_clock;

void sync(const torch::Device& dev) {
  if (dev.is_cuda()) torch::cuda::synchronize();
}

// Mean wall time of `f` over `reps` calls, the device drained before and after each; `before`
// runs untimed ahead of each call.
double device_ms(const torch::Device& dev, int reps, const std::function<void()>& f, const std::function<void()>& before = [] {}) {
  double total = 0;
  for (int i = 0; i < reps; ++i) {
    before();
    sync(dev);
    const auto t0 = clk::now();
    f();
    sync(dev);
    total += std::chrono::duration<double, std::milli>(clk::now() - t0).count();
  }
  return total / reps;
}
}  // namespace

int run(int argc, char** argv);

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "bench_monitor_costs: %s\n", e.what_without_backtrace());
    return 2;
  }
}

int run(int argc, char** argv) {
  std::string device = "cuda", json_path;
  int reps = 30;
  int64_t n_layer = 12, n_head = 12, n_embd = 768, batch = 16, block = 1024, vocab = 96;
  CLI::App app{"Cost of the Monitor's pieces against memory passes over the same bytes", "bench_monitor_costs"};
  app.add_option("--device", device, "cuda or cpu")->capture_default_str();
  app.add_option("--reps", reps)->capture_default_str();
  app.add_option("--n-layer", n_layer)->capture_default_str();
  app.add_option("--n-head", n_head)->capture_default_str();
  app.add_option("--n-embd", n_embd)->capture_default_str();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--block", block)->capture_default_str();
  app.add_option("--json", json_path, "Also write the figures as JSON");
  CLI11_PARSE(app, argc, argv);
  if (device == "cuda" && !torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_monitor_costs: no CUDA device visible; run with --device cpu or on the GPU machine\n");
    return 77;
  }
  const torch::Device dev(device == "cuda" ? torch::kCUDA : torch::kCPU);
  torch::NoGradGuard no_grad;
  const auto opt = torch::TensorOptions().device(dev);
  std::vector<torch::Tensor> params;
  auto mon = c10::make_intrusive<lpdiag::hooks::Monitor>("/tmp/bench_monitor_costs.h5", n_layer, n_head, n_embd / n_head, "{}", 0, 1);
  for (int64_t l = 0; l < n_layer; ++l) {
    const std::string p = "h." + std::to_string(l);
    params.push_back(0.02 * torch::randn({3 * n_embd, n_embd}, opt));
    mon->add_fused_qkv(p + ".attn", l, params.back());
    params.push_back(0.02 * torch::randn({n_embd, n_embd}, opt));
    mon->add_matrix(p + ".attn.c_proj", "attn_o", l, 0, params.back(), 0, n_embd);
    params.push_back(0.02 * torch::randn({4 * n_embd, n_embd}, opt));
    mon->add_matrix(p + ".mlp.c_fc", "mlp_in", l, 0, params.back(), 0, 4 * n_embd);
    mon->add_activation(p + ".out", l);
  }
  params.push_back(0.02 * torch::randn({vocab, n_embd}, opt));
  mon->add_matrix("lm_head", "lm_head", -1, 0, params.back(), 0, vocab);
  const torch::Tensor x = torch::randn({batch, block, n_embd}, opt);
  const torch::Tensor loss = torch::full({}, 2.5, opt), gnorm = torch::full({}, 0.7, opt);
  int64_t step = 0;
  auto observe_all = [&] {
    for (int64_t l = 0; l < n_layer; ++l) mon->observe_activation("h." + std::to_string(l) + ".out", x);
  };
  auto train_step = [&] {  // what an optimizer does to the weights between records
    for (auto& p : params) p.add_(1e-4 * torch::randn_like(p));
  };
  // Warm up: cold power iterations, the first update, graph capture for both stack buffers.
  for (int i = 0; i < 4; ++i) observe_all(), mon->record(step++, loss, 1e-3, gnorm), train_step();

  int64_t weight_bytes = 0;
  for (const auto& p : params) weight_bytes += p.numel() * 4;
  const double read_ms = device_ms(dev, reps, [&] { (void)x.sum(); });
  const double observe_ms = device_ms(dev, reps, [&] { mon->observe_activation("h.0.out", x); });
  const double copy_ms = device_ms(dev, reps, [&] {
    for (const auto& p : params) (void)p.clone();
  });
  double host_ms = 0;
  const double record_ms = device_ms(
      dev, reps,
      [&] {
        const auto t0 = clk::now();
        mon->record(step++, loss, 1e-3, gnorm);
        host_ms += std::chrono::duration<double, std::milli>(clk::now() - t0).count();
      },
      train_step);
  mon->set_cadence("weights", 1000000), mon->set_cadence("updates", 1000000);
  const double scalars_ms = device_ms(dev, reps, [&] { mon->record(step++, loss, 1e-3, gnorm); });
  mon->close();

  const double act_bytes = static_cast<double>(x.numel()) * 4;
  std::printf("device %s, %lld layers, width %lld, activations %lldx%lldx%lld, %d reps\n", dev.str().c_str(), (long long)n_layer,
              (long long)n_embd, (long long)batch, (long long)block, (long long)n_embd, reps);
  std::printf("%-44s %9s %9s %s\n", "piece", "ms", "baseline", "ratio");
  std::printf("%-44s %9.3f %9.3f %.2f  (one read of the %.0f MB tensor)\n", "observe_activation (one block output)", observe_ms,
              read_ms, observe_ms / read_ms, act_bytes / 1e6);
  const double rec = record_ms;
  std::printf("%-44s %9.3f %9.3f %.2f  (one copy of the %.0f MB of tracked weights)\n", "record(), weights + updates due", rec,
              copy_ms, rec / copy_ms, weight_bytes / 1e6);
  std::printf("%-44s %9.3f\n", "record(), host time until it returns", host_ms / reps);
  std::printf("%-44s %9.3f\n", "record(), only scalars due", scalars_ms);
  if (!json_path.empty()) {
    nlohmann::json j = {{"device", dev.str()},           {"reps", reps},           {"observe_ms", observe_ms},
                        {"read_baseline_ms", read_ms},   {"record_ms", rec},       {"copy_baseline_ms", copy_ms},
                        {"record_host_ms", host_ms / reps}, {"scalars_ms", scalars_ms}, {"weight_bytes", weight_bytes}};
    std::ofstream(json_path) << j.dump(2) << "\n";
  }
  return 0;
}
