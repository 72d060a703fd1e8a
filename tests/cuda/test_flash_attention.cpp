// gpu: the CUDA fa2 kernels against the CPU fa2 emulation on the same inputs.
//  - integer-valued inputs whose dot products and sums are exact in any order and whose P-bar
//    is exactly 0 or 1: O bit for bit, every counter equal (fix none, paper, safe, sr);
//  - the paper's adversarial input (a duplicated max key, sign-skewed V): counters equal, O within
//    1 bf16 ulp, and at "full" the O / delta error sums agree with the CPU's fp64 hp errors
//    (fix none, paper, safe and sr; sr's stochastic O is bit-identical on the exact inputs);
//  - fresh Gaussian inputs: O within 1 bf16 ulp, dQ / dK / dV close to the emulation.
// Exits 77 (skipped) when no GPU is visible. `--small` runs only small shapes (for sanitizers).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "../attention/attention_inputs.hpp"
#include "lpdiag/cuda/device.hpp"
#include "lpdiag/cuda/flash_attention.hpp"
#include "lpdiag/error.hpp"
#include "test_seed.hpp"

using namespace lpdiag;
using namespace lpdiag::testing;

namespace {

int failures = 0;
#define EXPECT(cond, ...)                         \
  do {                                            \
    if (!(cond)) {                                \
      ++failures;                                 \
      std::printf("FAIL %s: ", #cond);            \
      std::printf(__VA_ARGS__);                   \
      std::printf("\n");                          \
    }                                             \
  } while (0)

// Distance in bf16 steps between two bf16 values (both finite).
long ulps(float a, float b) {
  auto key = [](float x) {
    const long u = bf16_bits_rne(x);
    return (u & 0x8000) ? -(u & 0x7FFF) : u;
  };
  return std::labs(key(a) - key(b));
}

long max_ulps(const std::vector<float>& a, const std::vector<float>& b, long* differing) {
  long m = 0, n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const long u = ulps(a[i], b[i]);
    m = std::max(m, u);
    n += u != 0;
  }
  if (differing) *differing = n;
  return m;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / (den > 0 ? den : 1));
}

// Integer inputs: q = (1, 0, ...); key j has k_j0 = 0 (a max, S = 0) or -2000 (S <= -125, so
// P-bar underflows to exactly 0); V small integers, mostly positive; dO small integers. Every
// dot product and every sum is exact in fp32 whatever the order.
Tensors exact_ties(std::int64_t H, std::int64_t N, std::int64_t d, std::uint64_t seed) {
  Tensors t{1, H, N, d, {}, {}, {}, {}};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> coin(0, 3), small(-2, 6), g(-3, 3);
  const auto n = static_cast<std::size_t>(H * N * d);
  t.q.assign(n, 0.f), t.k.assign(n, 0.f), t.v.resize(n), t.dout.resize(n);
  for (std::size_t r = 0; r < static_cast<std::size_t>(H * N); ++r) {
    t.q[r * d] = 1.f;
    t.k[r * d] = coin(rng) == 0 || r % static_cast<std::size_t>(N) == 0 ? 0.f : -2000.f;
    for (std::int64_t c = 0; c < d; ++c) {
      t.v[r * d + c] = static_cast<float>(small(rng));
      t.dout[r * d + c] = static_cast<float>(g(rng));
    }
  }
  return t;
}

bool same_counters(const HeadCounters& a, const HeadCounters& b) {
  return a.rows == b.rows && a.repeated_max_rows == b.repeated_max_rows &&
         a.tile_repeated_max_rows == b.tile_repeated_max_rows && a.zero_max_repeated_rows == b.zero_max_repeated_rows &&
         a.pbar_one_entries == b.pbar_one_entries && a.fix_engaged_rows == b.fix_engaged_rows &&
         a.logit_max == b.logit_max;
}

std::string describe(const HeadCounters& c) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "rows %lld rep %lld tile %lld zero %lld pbar1 %lld fix %lld lmax %g",
                (long long)c.rows, (long long)c.repeated_max_rows, (long long)c.tile_repeated_max_rows,
                (long long)c.zero_max_repeated_rows, (long long)c.pbar_one_entries, (long long)c.fix_engaged_rows,
                (double)c.logit_max);
  return buf;
}

void compare_counters(const AttentionRun& cpu, const AttentionRun& gpu, const char* what) {
  for (std::size_t h = 0; h < cpu.heads.size(); ++h)
    EXPECT(same_counters(cpu.heads[h], gpu.heads[h]), "%s head %zu: cpu {%s} gpu {%s}", what, h,
           describe(cpu.heads[h]).c_str(), describe(gpu.heads[h]).c_str());
}

AttentionConfig config(bool causal, const char* fix) {
  AttentionConfig c;
  c.causal = causal;
  c.fix = parse_fix(fix);
  return c;
}

void exact_case(std::int64_t N, std::int64_t d, bool causal, std::uint64_t seed) {
  const Tensors t = exact_ties(2, N, d, seed);
  for (const char* fix : {"none", "paper", "safe", "sr"}) {
    const AttentionConfig c = config(causal, fix);
    AttentionOptions opt;
    opt.backward = false;
    opt.instrument = false;
    const AttentionRun cpu = run_attention(c, t.inputs(), opt);
    const AttentionRun gpu = cuda::run_attention_cuda(c, t.inputs(), cuda::Instrument::counters, false);
    char what[128];
    std::snprintf(what, sizeof what, "exact N=%lld d=%lld causal=%d fix=%s", (long long)N, (long long)d, causal, fix);
    compare_counters(cpu, gpu, what);
    EXPECT(gpu.nan_count == 0, "%s: %lld non-finite outputs", what, (long long)gpu.nan_count);
    if (std::string(fix) == "none" || std::string(fix) == "sr") {  // sr: the CPU's and the kernel's random bits agree
      long diff = 0;
      max_ulps(cpu.o, gpu.o, &diff);
      EXPECT(diff == 0, "%s: %ld O elements differ from the CPU bit pattern", what, diff);
    }
  }
}

void adversarial_case(std::int64_t N, std::int64_t d, bool causal, std::uint64_t seed) {
  const Tensors t = repeated_max(2, N, d, 8.0f, seed);
  for (const char* fix : {"none", "paper", "safe", "sr"}) {
    const AttentionConfig c = config(causal, fix);
    const AttentionRun cpu = run_attention(c, t.inputs());
    const AttentionRun gpu = cuda::run_attention_cuda(c, t.inputs(), cuda::Instrument::full, true);
    char what[128];
    std::snprintf(what, sizeof what, "adversarial N=%lld d=%lld causal=%d fix=%s", (long long)N, (long long)d, causal, fix);
    compare_counters(cpu, gpu, what);
    EXPECT(gpu.nan_count == 0, "%s: %lld non-finite outputs", what, (long long)gpu.nan_count);
    long diff = 0;
    const long mu = max_ulps(cpu.o, gpu.o, &diff);
    EXPECT(mu <= 1, "%s: O differs from the CPU by up to %ld bf16 ulps (%ld elements)", what, mu, diff);
    for (std::size_t h = 0; h < cpu.heads.size(); ++h) {
      const HeadCounters &a = cpu.heads[h], &b = gpu.heads[h];
      EXPECT(a.o_err_count == b.o_err_count && a.delta_err_count == b.delta_err_count, "%s: error counts %lld/%lld vs %lld/%lld",
             what, (long long)a.o_err_count, (long long)a.delta_err_count, (long long)b.o_err_count, (long long)b.delta_err_count);
      // The GPU's hp is fp32 with P-bar split into two bf16 terms (relative error ~2^-17), not
      // fp64, and its O may differ by 1 ulp where the MMA order flips a rounding: the mean and
      // RMS error agree to 10% where the bias is large (the fix off), to 25% of the RMS otherwise.
      const double na = static_cast<double>(a.o_err_count), nb = static_cast<double>(b.o_err_count);
      const double dna = static_cast<double>(a.delta_err_count), dnb = static_cast<double>(b.delta_err_count);
      const double rms_a = std::sqrt(a.o_err_sumsq / na), rms_b = std::sqrt(b.o_err_sumsq / nb);
      const double mean_a = a.o_err_sum / na, mean_b = b.o_err_sum / nb;
      EXPECT(std::fabs(rms_a - rms_b) <= 0.10 * rms_a, "%s head %zu: O error RMS cpu %g gpu %g", what, h, rms_a, rms_b);
      EXPECT(std::fabs(mean_a - mean_b) <= 0.25 * rms_a, "%s head %zu: O error mean cpu %g gpu %g", what, h, mean_a, mean_b);
      const double dm_a = a.delta_err_sum / dna, dm_b = b.delta_err_sum / dnb;
      const double drms_a = std::sqrt(a.delta_err_sumsq / dna);
      EXPECT(std::fabs(dm_a - dm_b) <= 0.25 * drms_a, "%s head %zu: delta error mean cpu %g gpu %g (rms %g)", what, h, dm_a,
             dm_b, drms_a);
    }
  }
}

void gaussian_case(std::int64_t B, std::int64_t H, std::int64_t N, std::int64_t d, bool causal, std::uint64_t seed) {
  const Tensors t = gaussian(B, H, N, d, seed);
  const AttentionConfig c = config(causal, "none");
  AttentionOptions opt;
  opt.instrument = false;
  const AttentionRun cpu = run_attention(c, t.inputs(), opt);
  const AttentionRun gpu = cuda::run_attention_cuda(c, t.inputs(), cuda::Instrument::counters, true);
  char what[128];
  std::snprintf(what, sizeof what, "gaussian B=%lld H=%lld N=%lld d=%lld causal=%d", (long long)B, (long long)H, (long long)N,
                (long long)d, causal);
  EXPECT(gpu.nan_count == 0, "%s: %lld non-finite outputs", what, (long long)gpu.nan_count);
  // Only the summation order (MMA, the quad's row-sum split) and exp's last bit differ. A last-bit
  // difference of exp can flip bf16(P-bar) by one bf16 ulp (<= 2^-8 P-bar), moving O by at most
  // 2^-8 max|v|; the final bf16 rounding of O (|O| <= max|v|) can flip once more: |dO| <= 2^-7 max|v|.
  // Over the whole tensor the flips are rare: relative L2 distance under half a bf16 ulp (2^-9).
  float vmax = 0.f;
  for (float x : t.v) vmax = std::max(vmax, std::fabs(x));
  long diff = 0, over = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < cpu.o.size(); ++i) {
    const double dlt = std::fabs(double(cpu.o[i]) - double(gpu.o[i]));
    diff += dlt != 0.0;
    over += dlt > 0x1p-7 * vmax;
    worst = std::max(worst, dlt / (0x1p-7 * vmax));
  }
  const double ro = rel_diff(gpu.o, cpu.o);
  EXPECT(over == 0 && ro < 0x1p-9, "%s: %ld O elements beyond 2^-7 max|v| (worst %.2f of it), relative L2 %.2e", what, over,
         worst, ro);
  // Gradients: bf16(P) and bf16(dS) feed MMAs in another order, and dQ's fp32 atomics add in any
  // order; both flip individual bf16 roundings. Relative L2 distance to the emulation stays under
  // 1% (bf16's own half-ulp is 0.4%).
  const double rq = rel_diff(gpu.dq, cpu.dq), rk = rel_diff(gpu.dk, cpu.dk), rv = rel_diff(gpu.dv, cpu.dv);
  EXPECT(rq < 1e-2 && rk < 1e-2 && rv < 1e-2, "%s: gradient relative distance dq %g dk %g dv %g", what, rq, rk, rv);
  // Both backward key blocks (64 and 128 keys per block; the default depends on d and the
  // kernel) run the same per-element operations; only dQ's atomic order differs. Same bound.
  double wrel[2][3];
  for (int w = 0; w < 2; ++w) {
    const int key_block = w == 0 ? 64 : 128;
    const AttentionRun kb = cuda::run_attention_cuda(c, t.inputs(), cuda::Instrument::counters, true, key_block);
    double* r = wrel[w];
    r[0] = rel_diff(kb.dq, cpu.dq), r[1] = rel_diff(kb.dk, cpu.dk), r[2] = rel_diff(kb.dv, cpu.dv);
    EXPECT(r[0] < 1e-2 && r[1] < 1e-2 && r[2] < 1e-2, "%s: backward key block %d: gradient relative distance dq %g dk %g dv %g",
           what, key_block, r[0], r[1], r[2]);
    EXPECT(kb.nan_count == 0, "%s: backward key block %d: %lld non-finite outputs", what, key_block, (long long)kb.nan_count);
  }
  std::printf("%s: O %ld of %zu elements differ (worst %.2f of the bound); grads rel %.2e %.2e %.2e (key blocks 64: %.2e %.2e %.2e, "
              "128: %.2e %.2e %.2e)\n",
              what, diff, cpu.o.size(), worst, rq, rk, rv, wrel[0][0], wrel[0][1], wrel[0][2], wrel[1][0], wrel[1][1], wrel[1][2]);
  for (std::size_t h = 0; h < cpu.heads.size(); ++h)
    EXPECT(cpu.heads[h].rows == gpu.heads[h].rows && cpu.heads[h].repeated_max_rows == gpu.heads[h].repeated_max_rows,
           "%s head %zu: cpu {%s} gpu {%s}", what, h, describe(cpu.heads[h]).c_str(), describe(gpu.heads[h]).c_str());
}

void bad_arguments() {
  const Tensors t = gaussian(1, 1, 16, 32, 1);
  bool threw = false;
  try {
    cuda::run_attention_cuda(config(false, "none"), t.inputs(), cuda::Instrument::off, false);
  } catch (const Error& e) {
    threw = std::string(e.what()).find("head dim") != std::string::npos;
  }
  EXPECT(threw, "head dim 32 must be refused with a message naming the head dim");
}

}  // namespace

int main(int argc, char** argv) {
  if (cuda::device_count() == 0) {
    std::puts("SKIP: no CUDA device visible");
    return 77;
  }
  const bool small = argc > 1 && std::strcmp(argv[1], "--small") == 0;
  std::printf("device: %s\n", cuda::device_name().c_str());
  const std::uint64_t seed = lpdiag_test::seed("test_flash_attention#34", 1269249u);
  std::printf("seed %llu\n", (unsigned long long)seed);
  bad_arguments();
  const std::vector<std::int64_t> lengths = small ? std::vector<std::int64_t>{1, 70, 129} : std::vector<std::int64_t>{1, 37, 64, 129, 300};
  for (std::int64_t d : {64, 128})
    for (bool causal : {false, true})
      for (std::int64_t N : lengths) {
        exact_case(N, d, causal, seed + N);
        adversarial_case(std::max<std::int64_t>(N, 2), d, causal, seed + 3 * N);  // the duplicated key needs 2 rows
        gaussian_case(small ? 1 : 2, 3, N, d, causal, seed + 7 * N);
      }
  std::printf("%s: %d failures\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
