// gpu: the observer on the device, on lpdiag's own fa2 CUDA kernel, on every probe family, causal
// and not, at d 64 and 128. The kernel run at "full" counts repeated maxima inside itself and
// measures its O and delta errors against its fp64 path; the CUDA observer, given only q, k, v,
// the kernel's O and dO, must find:
//  - rows exactly, repeated-maximum rows within 1% of the rows (the kernel's S is summed in the
//    tensor cores' order, the observer's exactly: last-bit ties can differ, ties of equal inputs
//    cannot), the logit max within 4 fp32 ulps;
//  - the O error count exactly, and the O and delta error z within 10% (+0.5). The two measure
//    the same output against different references: the kernel's in-kernel hp path carries P-bar
//    to ~2^-17 but keeps its own fp32 max, exp (the MUFU's) and row sum, where the observer is
//    exact (fp64). Where the error sits in P-bar == 1 entries (strong sinks, duplicated keys) the
//    two references differ by a few percent of z: up to 6.4% (O z 14.62 in-kernel, 15.56
//    observed, strong-sinks d 128) on the H200, 2026-12-06; the observer matches the CPU's fp64
//    judge (the kernel survey) to 1e-11 in O z there (tests/python/observe_cuda.py).
// And against the CPU observer on the same O: ties exactly, O and delta sums to 1e-9 of their
// scale (the same fp64 sums, in another order), grouped-query heads included.
// Exits 77 (skipped) without a device.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "lpdiag/attention/probe_families.hpp"
#include "lpdiag/cuda/cuda_check.hpp"
#include "lpdiag/cuda/device.hpp"
#include "lpdiag/cuda/flash_attention.hpp"
#include "lpdiag/cuda/observer.hpp"
#include "lpdiag/numerics/convert.hpp"
#include "lpdiag/stats/bias_tests.hpp"

using namespace lpdiag;

namespace {

struct DeviceBf16 {
  void* ptr = nullptr;
  explicit DeviceBf16(const std::vector<float>& x) {
    std::vector<std::uint16_t> bits(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) bits[i] = bf16_bits_rne(x[i]);
    LPDIAG_CUDA_CHECK(cudaMalloc(&ptr, bits.size() * 2));
    LPDIAG_CUDA_CHECK(cudaMemcpy(ptr, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
  }
  ~DeviceBf16() { cudaFree(ptr); }
  cuda::ObservedView view(std::int64_t H, std::int64_t N, std::int64_t d) const { return {ptr, H * N * d, N * d, d}; }
};

// The CUDA observer on host data: forward with o, then backward with dout.
std::vector<HeadCounters> observe_on_device(const ProbeCase& pc, const std::vector<float>& k, const std::vector<float>& v,
                                            std::int64_t Hkv, const std::vector<float>& o) {
  DeviceBf16 q(pc.q), kd(k), vd(v), od(o), g(pc.dout);
  cuda::DeviceHeadCounters* counters = nullptr;
  float* err = nullptr;
  LPDIAG_CUDA_CHECK(cudaMalloc(&counters, sizeof(cuda::DeviceHeadCounters) * pc.H));
  LPDIAG_CUDA_CHECK(cudaMemset(counters, 0, sizeof(cuda::DeviceHeadCounters) * pc.H));
  LPDIAG_CUDA_CHECK(cudaMalloc(&err, sizeof(float) * pc.q.size()));
  cuda::ObserveForwardArgs f;
  f.q = q.view(pc.H, pc.N, pc.d), f.k = kd.view(Hkv, pc.N, pc.d), f.v = vd.view(Hkv, pc.N, pc.d), f.o = od.view(pc.H, pc.N, pc.d);
  f.shape.B = pc.B, f.shape.Hq = pc.H, f.shape.Hkv = Hkv, f.shape.Nq = pc.N, f.shape.Nk = pc.N, f.shape.d = pc.d;
  f.shape.causal = pc.causal;
  f.o_error = err;
  f.counters = counters;
  cuda::observe_forward(f);
  cuda::ObserveBackwardArgs b;
  b.dout = g.view(pc.H, pc.N, pc.d);
  b.o_error = err;
  b.batches = pc.B, b.Hq = pc.H, b.Nq = pc.N, b.d = pc.d;
  b.counters = counters;
  cuda::observe_backward(b);
  std::vector<HeadCounters> out = cuda::read_counters(counters, pc.H, nullptr);
  cudaFree(counters);
  cudaFree(err);
  return out;
}

double z(std::int64_t n, double s, double ss) { return mean_z(n, s, ss); }
bool near_z(double a, double b, double rel) { return std::fabs(a - b) <= rel * std::fabs(b) + 0.5; }
bool near_sum(double a, double b, std::int64_t n, double ss) { return std::fabs(a - b) <= 1e-9 * std::sqrt(ss * static_cast<double>(n)) + 1e-300; }

}  // namespace

int main() {
  if (cuda::device_count() == 0) {
    std::puts("SKIP: no CUDA device visible");
    return 77;
  }
  std::printf("device: %s; inputs: the probe families at the probe's fixed seed\n", cuda::device_name().c_str());
  std::printf("%-13s %-6s %-4s %12s %12s %9s %9s %9s %9s  %s\n", "family", "causal", "d", "rep kernel", "rep observed", "O z kern",
              "O z obs", "δ z kern", "δ z obs", "verdict");
  int failures = 0;
  for (const auto& fam : probe_family_names())
    for (bool causal : {false, true})
      for (std::int64_t hd : {64, 128}) {
        const ProbeCase pc = make_probe_case(fam, causal, kProbeSeed, hd);
        AttentionConfig cfg;
        cfg.causal = causal;
        const AttentionInputs in{pc.q.data(), pc.k.data(), pc.v.data(), pc.dout.data(), pc.B, pc.H, pc.N, pc.d};
        const AttentionRun run = cuda::run_attention_cuda(cfg, in, cuda::Instrument::full, true);
        const std::vector<HeadCounters> dev = observe_on_device(pc, pc.k, pc.v, pc.H, run.o);
        ObservedCall c{pc.q.data(), pc.k.data(), pc.v.data(), run.o.data(), pc.B, pc.H, pc.H, pc.N, pc.N, pc.d, causal};
        const ObservedForward host = observe_forward(c);
        const std::vector<HeadCounters> host_d = observe_backward(pc.dout.data(), host.o_error, pc.B, pc.H, pc.N, pc.d);
        bool ok = true;
        std::int64_t rep_k = 0, rep_o = 0;
        double ozk = 0, ozo = 0, dzk = 0, dzo = 0;
        for (std::int64_t h = 0; h < pc.H; ++h) {
          const HeadCounters& k = run.heads[static_cast<std::size_t>(h)];
          const HeadCounters& o = dev[static_cast<std::size_t>(h)];
          const HeadCounters& ho = host.heads[static_cast<std::size_t>(h)];
          const HeadCounters& hd_ = host_d[static_cast<std::size_t>(h)];
          rep_k += k.repeated_max_rows, rep_o += o.repeated_max_rows;
          const double zk = z(k.o_err_count, k.o_err_sum, k.o_err_sumsq), zo = z(o.o_err_count, o.o_err_sum, o.o_err_sumsq);
          const double dk = z(k.delta_err_count, k.delta_err_sum, k.delta_err_sumsq),
                       dob = z(o.delta_err_count, o.delta_err_sum, o.delta_err_sumsq);
          if (h == 0) ozk = zk, ozo = zo, dzk = dk, dzo = dob;
          const bool vs_kernel = o.rows == k.rows && std::llabs(o.repeated_max_rows - k.repeated_max_rows) <= k.rows / 100 &&
                                 std::fabs(o.logit_max - k.logit_max) <= 4e-6f * std::fmax(1.0f, std::fabs(k.logit_max)) &&
                                 o.o_err_count == k.o_err_count && near_z(zo, zk, 0.10) && o.delta_err_count == k.delta_err_count &&
                                 near_z(dob, dk, 0.10);
          const bool vs_host = o.repeated_max_rows == ho.repeated_max_rows && o.logit_max == ho.logit_max &&
                               near_sum(o.o_err_sum, ho.o_err_sum, ho.o_err_count, ho.o_err_sumsq) &&
                               near_sum(o.delta_err_sum, hd_.delta_err_sum, hd_.delta_err_count, hd_.delta_err_sumsq);
          if (!vs_kernel || !vs_host)
            std::printf("  head %lld: %s\n", static_cast<long long>(h),
                        !vs_kernel ? "differs from the kernel's own counters beyond the tolerance" : "differs from the CPU observer");
          ok = ok && vs_kernel && vs_host;
        }
        failures += !ok;
        std::printf("%-13s %-6s %-4lld %12lld %12lld %+9.2f %+9.2f %+9.2f %+9.2f  %s\n", fam.c_str(), causal ? "yes" : "no",
                    static_cast<long long>(hd), static_cast<long long>(rep_k), static_cast<long long>(rep_o), ozk, ozo, dzk, dzo,
                    ok ? "ok" : "FAIL");
        std::fflush(stdout);
      }
  // Grouped-query heads: one k/v head per batch element read by every q head.
  {
    const ProbeCase pc = make_probe_case("strong-sinks", true);
    const std::size_t per = static_cast<std::size_t>(pc.N * pc.d);
    std::vector<float> k1, v1;
    ProbeCase rep = pc;
    for (std::int64_t b = 0; b < pc.B; ++b) {
      const std::size_t h0 = static_cast<std::size_t>(b * pc.H) * per;
      k1.insert(k1.end(), pc.k.begin() + static_cast<std::ptrdiff_t>(h0), pc.k.begin() + static_cast<std::ptrdiff_t>(h0 + per));
      v1.insert(v1.end(), pc.v.begin() + static_cast<std::ptrdiff_t>(h0), pc.v.begin() + static_cast<std::ptrdiff_t>(h0 + per));
      for (std::int64_t h = 1; h < pc.H; ++h)
        for (std::size_t x = 0; x < per; ++x) rep.k[h0 + h * per + x] = pc.k[h0 + x], rep.v[h0 + h * per + x] = pc.v[h0 + x];
    }
    AttentionConfig cfg;
    cfg.causal = true;
    const AttentionRun run = cuda::run_attention_cuda(cfg, {rep.q.data(), rep.k.data(), rep.v.data(), rep.dout.data(), pc.B, pc.H, pc.N, pc.d},
                                                      cuda::Instrument::counters, false);
    const std::vector<HeadCounters> grouped = observe_on_device(pc, k1, v1, 1, run.o);
    ObservedCall c{rep.q.data(), rep.k.data(), rep.v.data(), run.o.data(), pc.B, pc.H, pc.H, pc.N, pc.N, pc.d, true};
    const ObservedForward host = observe_forward(c);
    bool ok = true;
    for (std::int64_t h = 0; h < pc.H; ++h) {
      const HeadCounters &g = grouped[static_cast<std::size_t>(h)], &o = host.heads[static_cast<std::size_t>(h)];
      ok = ok && g.repeated_max_rows == o.repeated_max_rows && near_sum(g.o_err_sum, o.o_err_sum, o.o_err_count, o.o_err_sumsq);
    }
    failures += !ok;
    std::printf("grouped-query (1 k/v head for %lld q heads): %s\n", static_cast<long long>(pc.H), ok ? "ok" : "FAIL");
  }
  std::printf("%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
