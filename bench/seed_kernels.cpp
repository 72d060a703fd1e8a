// Speed of the seed, seed-mma and fp32 CUDA kernels against lpdiag's fa2 kernels in the same run (the baseline),
// forward + backward at `counters`, inputs N(0, 1) in bf16:
//   bench_seed_kernels [--reps N] [--mma-only]   shapes: GPT-2 small (B16 H12 N1024 d64 causal), a
//                                      small model's (B32 H6 N256 d64 causal), and B8 H8 N1024 d128
//                                      causal (fa2 and seed-mma only)
// Prints ms per fwd+bwd (median of reps), the ratio to fa2, and the forward's and backward's
// medians apart (a third event between them). Exits 77 without a device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "lpdiag/cuda/cuda_check.hpp"
#include "lpdiag/cuda/device.hpp"
#include "lpdiag/cuda/flash_attention.hpp"
#include "lpdiag/numerics/convert.hpp"

using namespace lpdiag;

namespace {

struct Shape {
  const char* name;
  std::int64_t B, H, N, d;
};

void* dev_alloc(std::size_t bytes) {
  void* p = nullptr;
  LPDIAG_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}

struct Timing {
  double total, fwd, bwd;  // medians over the reps, each on its own
};

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Timing time_ms(const Shape& s, const cuda::KernelNumerics& num, int reps) {
  const std::size_t n = static_cast<std::size_t>(s.B * s.H * s.N * s.d), rows = static_cast<std::size_t>(s.B * s.H * s.N);
  std::mt19937 g(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<std::uint16_t> host(n);
  void* in[4];
  for (auto& p : in) {
    for (auto& x : host) x = bf16_bits_rne(nd(g));
    p = dev_alloc(n * 2);
    LPDIAG_CUDA_CHECK(cudaMemcpy(p, host.data(), n * 2, cudaMemcpyHostToDevice));
  }
  void *o = dev_alloc(n * 2), *dq = dev_alloc(n * 2), *dk = dev_alloc(n * 2), *dv = dev_alloc(n * 2);
  auto *lse = static_cast<float*>(dev_alloc(rows * 4)), *delta = static_cast<float*>(dev_alloc(rows * 4)),
       *acc = static_cast<float*>(dev_alloc(n * 4));
  auto* counters = static_cast<cuda::DeviceHeadCounters*>(dev_alloc(s.H * sizeof(cuda::DeviceHeadCounters)));
  cuda::clear_counters(counters, s.H, nullptr);
  const std::int64_t sn = s.d, sh = s.N * s.d, sb = s.H * s.N * s.d;
  cuda::FlashForwardArgs f;
  f.shape = {s.B, s.H, s.N, s.d, true, 0.f};
  f.numerics = num;
  f.q = {in[0], sb, sh, sn}, f.k = {in[1], sb, sh, sn}, f.v = {in[2], sb, sh, sn};
  f.o = o, f.lse = lse, f.counters = counters, f.instrument = cuda::Instrument::counters;
  cuda::FlashBackwardArgs b;
  b.shape = f.shape, b.numerics = num, b.q = f.q, b.k = f.k, b.v = f.v, b.o = {o, sb, sh, sn}, b.dout = {in[3], sb, sh, sn};
  b.lse = lse, b.dq = dq, b.dk = dk, b.dv = dv, b.dq_accum = acc, b.delta = delta;
  cudaEvent_t e0, em, e1;
  cudaEventCreate(&e0), cudaEventCreate(&em), cudaEventCreate(&e1);
  std::vector<float> ms, fwd, bwd;
  for (int r = 0; r < reps + 2; ++r) {
    cudaEventRecord(e0);
    cuda::flash_forward(f);
    cudaEventRecord(em);
    cuda::flash_backward(b);
    cudaEventRecord(e1);
    LPDIAG_CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0, tf = 0, tb = 0;
    cudaEventElapsedTime(&t, e0, e1);
    cudaEventElapsedTime(&tf, e0, em);
    cudaEventElapsedTime(&tb, em, e1);
    if (r >= 2) ms.push_back(t), fwd.push_back(tf), bwd.push_back(tb);  // two warm-ups (the seed tables are made on the first)
  }
  for (cudaEvent_t e : {e0, em, e1}) cudaEventDestroy(e);
  for (void* p : {in[0], in[1], in[2], in[3], o, dq, dk, dv, static_cast<void*>(lse), static_cast<void*>(delta),
                  static_cast<void*>(acc), static_cast<void*>(counters)})
    cudaFree(p);
  return {median(ms), median(fwd), median(bwd)};
}

void print(const Shape& s, const char* what, int tile, const Timing& t, const Timing& base) {
  char label[32];
  std::snprintf(label, sizeof label, tile > 0 ? "%s tile %d" : "%s", what, tile);
  std::printf("%-40s %-18s %9.3f ms  %5.2fx fa2   (fwd %.3f ms %5.2fx, bwd %.3f ms %5.2fx)\n", s.name, label, t.total, t.total / base.total,
              t.fwd, t.fwd / base.fwd, t.bwd, t.bwd / base.bwd);
}

}  // namespace

int main(int argc, char** argv) {
  if (cuda::device_count() == 0) {
    std::puts("SKIP: no CUDA device visible");
    return 77;
  }
  int reps = 10;
  bool mma_only = false;  // --mma-only: fa2 and seed-mma (the slow CUDA-core kernels take seconds)
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--mma-only") mma_only = true;
    if (std::string(argv[i]) == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[i + 1]));
  }
  std::printf("device: %s; fwd+bwd at counters, median of %d\n", cuda::device_name().c_str(), reps);
  // The d128 shape (the seed-mma kernels' launch bounds differ by head dim) runs
  // seed-mma and fa2 only; the CUDA-core kernels would take minutes there.
  const Shape shapes[] = {{"gpt2-small B16 H12 N1024 d64 causal", 16, 12, 1024, 64},
                          {"small B32 H6 N256 d64 causal", 32, 6, 256, 64},
                          {"d128 B8 H8 N1024 d128 causal", 8, 8, 1024, 128}};
  for (const Shape& s : shapes) {
    const Timing base = time_ms(s, {Policy::fa2, 64, 64}, reps);
    print(s, "fa2", 0, base, base);
    for (int tile : {64, 128, 512}) print(s, "seed-mma", tile, time_ms(s, {Policy::seed_mma, tile, 64}, reps), base);
    if (mma_only || s.d != 64) continue;
    for (int tile : {64, 128, 512}) print(s, "seed", tile, time_ms(s, {Policy::seed, tile, 64}, reps), base);
    print(s, "fp32", 64, time_ms(s, {Policy::fp32, 64, 64}, reps), base);
  }
  return 0;
}
