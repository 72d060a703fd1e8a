// Emulated attention (fa2 policy) forward+backward against LibTorch's own fp32 CPU attention
// (matmul + softmax + matmul and its autograd backward) on the same shape, in the same run.
//   bench_attention_cpu [B H N d] [reps]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "lpdiag/attention/engine.hpp"
#include "lpdiag/numerics/convert.hpp"

using Clock = std::chrono::steady_clock;

template <class F>
double best_of(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

int main(int argc, char** argv) {
  const std::int64_t B = argc > 4 ? std::stoll(argv[1]) : 1, H = argc > 4 ? std::stoll(argv[2]) : 12,
                     N = argc > 4 ? std::stoll(argv[3]) : 1024, d = argc > 4 ? std::stoll(argv[4]) : 64;
  const int reps = argc > 5 ? std::stoi(argv[5]) : 3;
  const int threads = static_cast<int>(std::thread::hardware_concurrency());
  torch::set_num_threads(threads);
  std::printf("shape B%lld H%lld N%lld d%lld, %d threads, best of %d\n", (long long)B, (long long)H, (long long)N,
              (long long)d, threads, reps);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> g;
  const auto n = static_cast<std::size_t>(B * H * N * d);
  std::vector<float> q(n), k(n), v(n), dout(n);
  for (auto* t : {&q, &k, &v, &dout})
    for (float& x : *t) x = lpdiag::round_bf16(g(rng));

  auto opts = torch::TensorOptions().dtype(torch::kFloat32);
  torch::Tensor tq = torch::from_blob(q.data(), {B, H, N, d}, opts).clone().requires_grad_(true);
  torch::Tensor tk = torch::from_blob(k.data(), {B, H, N, d}, opts).clone().requires_grad_(true);
  torch::Tensor tv = torch::from_blob(v.data(), {B, H, N, d}, opts).clone().requires_grad_(true);
  torch::Tensor tg = torch::from_blob(dout.data(), {B, H, N, d}, opts).clone();
  const double scale = 1.0 / std::sqrt(double(d));
  const double t_torch = best_of(reps, [&] {
    torch::Tensor s = torch::matmul(tq, tk.transpose(-2, -1)) * scale;
    torch::Tensor p = torch::softmax(s, -1);
    torch::Tensor o = torch::matmul(p, tv);
    o.backward(tg);
  });
  std::printf("%-44s %8.3f s  1.00x\n", "libtorch fp32 (matmul+softmax+matmul, bwd)", t_torch);

  lpdiag::AttentionInputs in{q.data(), k.data(), v.data(), dout.data(), B, H, N, d};
  for (bool instrument : {false, true}) {
    lpdiag::AttentionConfig cfg;
    cfg.policy = lpdiag::Policy::fa2;
    lpdiag::AttentionOptions opt;
    opt.instrument = instrument;
    const double t = best_of(reps, [&] { lpdiag::run_attention(cfg, in, opt); });
    std::printf("%-44s %8.3f s  %.2fx\n", instrument ? "lpdiag fa2 emulation, instrumented (+fp64 hp)" : "lpdiag fa2 emulation, counters only", t,
                t / t_torch);
  }
  return 0;
}
