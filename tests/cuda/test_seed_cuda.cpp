// gpu: the seed, seed-mma and fp32 CUDA kernels against the CPU engine, forward and backward, at
// `full`: `test_seed_cuda` (the seed policy), `test_seed_cuda seed-mma` (its tensor-core kernels,
// against the emulation's MMA model) or `test_seed_cuda fp32` (the fp32 policy):
//  - O, L, dQ, dK, dV bit for bit (every element; the kernels do the emulation's operations in
//    its order, with its exp and log: any difference fails and is printed). fp32's O, dQ, dK,
//    dV are compared as the op returns them, rounded to bf16 once (the kernels store bf16; the
//    CPU engine keeps fp32), L as fp32;
//  - the counters equal (integers exactly, logit_max exactly);
//  - the O error sums equal to 1e-9 of their scale sqrt(n sumsq) (the fp64 references sum in
//    another order and use the device's exp: ~1e-16 of O per element); the delta error sums to
//    1e-5 of that scale (the kernels' delta_hp is formed from O_lp minus an fp32 residual, as the
//    fa2 kernels do, which carries each O_hp to 2^-24 of its O error: up to 5e-6 measured on the
//    H200); positive / negative counts within 0.1% for O and 1% for delta (an error within the
//    references' precision of 0 can take either sign: 2 of 16,384 O elements did on skewed-v,
//    causal, on the H200).
// Inputs: every probe family (adversarial: sinks, strong sinks, repeated maxima, zero maxima,
// large logits, long rows), causal or not, at the probe's fixed seed and a fresh one (printed),
// fixes none / paper / safe / sr, key tiles 64, 128 and 512; and Gaussian inputs at a fresh seed
// with N not a multiple of 64, d = 64 and 128, query tiles 64 and 128. Exits 77 without a device.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "lpdiag/attention/probe_families.hpp"
#include "lpdiag/cuda/device.hpp"
#include "lpdiag/cuda/flash_attention.hpp"
#include "lpdiag/numerics/convert.hpp"
#include "test_seed.hpp"

using namespace lpdiag;

namespace {

struct Case {
  std::string name;
  AttentionConfig cfg;
  ProbeCase pc;
  std::future<AttentionRun> cpu;
};

long long differing(const std::vector<float>& a, const std::vector<float>& b, std::size_t* first) {
  long long n = 0;
  *first = a.size();
  if (a.size() != b.size()) return static_cast<long long>(std::max(a.size(), b.size()));
  for (std::size_t x = 0; x < a.size(); ++x) {
    std::uint32_t ua, ub;
    std::memcpy(&ua, &a[x], 4);
    std::memcpy(&ub, &b[x], 4);
    if (ua != ub && !(std::isnan(a[x]) && std::isnan(b[x]))) {
      if (n == 0) *first = x;
      ++n;
    }
  }
  return n;
}

bool close_rel(double a, double b, double tol) { return std::fabs(a - b) <= tol * std::max({std::fabs(a), std::fabs(b), 1e-300}); }
// Sums of signed errors can cancel: compare them on the scale of the errors themselves.
bool close_sum(double a, double b, double n, double sumsq, double tol) {
  return std::fabs(a - b) <= tol * std::max(std::sqrt(n * sumsq), 1e-300);
}
bool close_count(std::int64_t a, std::int64_t b, double frac) {
  return static_cast<double>(std::llabs(a - b)) <= std::max(1.0, frac * static_cast<double>(a + b));
}

ProbeCase gaussian(std::uint64_t seed, bool causal, std::int64_t d, std::int64_t B = 2, std::int64_t H = 3, std::int64_t N = 333) {
  ProbeCase pc;
  pc.family = "gaussian";
  pc.causal = causal;
  pc.B = B, pc.H = H, pc.N = N, pc.d = d;
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  const auto count = static_cast<std::size_t>(pc.B * pc.H * pc.N * pc.d);
  for (auto* x : {&pc.q, &pc.k, &pc.v, &pc.dout}) {
    x->resize(count);
    for (float& v : *x) v = round_bf16(x == &pc.q || x == &pc.k ? 1.5f * n(g) : n(g));
  }
  return pc;
}

}  // namespace

int main(int argc, char** argv) {
  // --small: a few small cases, for the sanitizers. --from N: skip the first N cases of the list
  // (the rest of a run that a time limit cut; the list's order does not depend on the fresh seed).
  bool small = false;
  long from = 0;
  Policy policy = Policy::seed;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--small") small = true;
    else if (arg == "--from" && a + 1 < argc) from = std::strtol(argv[++a], nullptr, 10);
    else policy = parse_policy(arg);
  }
  if ((policy != Policy::seed && policy != Policy::seed_mma && policy != Policy::fp32) || from < 0) {
    std::fprintf(stderr, "usage: test_seed_cuda [seed|seed-mma|fp32] [--small] [--from N]\n");
    return 2;
  }
  if (cuda::device_count() == 0) {
    std::puts("SKIP: no CUDA device visible");
    return 77;
  }
  const std::uint64_t fresh = lpdiag_test::seed("test_seed_cuda#32", 1253411u);
  std::printf("device: %s; policy %s; seeds: the probe's fixed seed and fresh seed %llu\n", cuda::device_name().c_str(),
              policy_name(policy), static_cast<unsigned long long>(fresh));
  std::vector<Case> cases;
  auto add = [&](ProbeCase pc, const char* fix, int tile_k, int tile_q, const std::string& tag) {
    Case c;
    c.pc = std::move(pc);
    c.cfg.policy = policy;
    c.cfg.causal = c.pc.causal;
    c.cfg.fix = parse_fix(fix);
    c.cfg.tile_k = tile_k;
    c.cfg.tile_q = tile_q;
    c.name = c.pc.family + (c.pc.causal ? " causal" : "") + " fix " + fix + " tile " + std::to_string(tile_k) + "/" +
             std::to_string(tile_q) + " d" + std::to_string(c.pc.d) + " " + tag;
    cases.push_back(std::move(c));
  };
  if (small) {
    for (bool causal : {false, true})
      for (const char* fix : {"none", "paper", "sr:seed=5"}) {
        add(gaussian(fresh, causal, 64, 1, 2, 100), fix, 128, 64, "fresh small");
      }
  }
  for (const auto& fam : small ? std::vector<std::string>{} : probe_family_names())
    for (bool causal : {false, true})
      for (const char* fix : {"none", "paper", "safe", "sr:seed=5"})
        for (int tile : {64, 128, 512}) {
          add(make_probe_case(fam, causal, kProbeSeed), fix, tile, 64, "fixed");
          if (tile != 128) add(make_probe_case(fam, causal, fresh), fix, tile, 64, "fresh");
        }
  for (bool causal : {false, true})
    for (std::int64_t d : {64, 128})
      for (int tq : {64, 128})
        if (!small) add(gaussian(fresh + d + tq, causal, d), "none", 128, tq, "fresh");
  const std::size_t total = cases.size();
  cases.erase(cases.begin(), cases.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(from, total)));
  if (from > 0) std::printf("cases %ld..%zu of %zu (--from %ld)\n", from + 1, total, total, from);
  for (auto& c : cases)
    c.cpu = std::async(std::launch::async, [&c] {
      const AttentionInputs in{c.pc.q.data(), c.pc.k.data(), c.pc.v.data(), c.pc.dout.data(), c.pc.B, c.pc.H, c.pc.N, c.pc.d};
      AttentionOptions opt;
      opt.backward = true;
      opt.instrument = true;
      opt.threads = 1;
      return run_attention(c.cfg, in, opt);
    });
  int failures = 0;
  long long elements = 0;
  for (auto& c : cases) {
    const ProbeCase& pc = c.pc;
    const AttentionInputs in{pc.q.data(), pc.k.data(), pc.v.data(), pc.dout.data(), pc.B, pc.H, pc.N, pc.d};
    const AttentionRun gpu = cuda::run_attention_cuda(c.cfg, in, cuda::Instrument::full, true);
    AttentionRun cpu = c.cpu.get();
    if (policy == Policy::fp32)
      for (auto* x : {&cpu.o, &cpu.dq, &cpu.dk, &cpu.dv})
        for (float& e : *x) e = round_bf16(e);
    std::string why;
    const char* names[] = {"O", "L", "dQ", "dK", "dV"};
    const std::vector<float>* cv[] = {&cpu.o, &cpu.lse, &cpu.dq, &cpu.dk, &cpu.dv};
    const std::vector<float>* gv[] = {&gpu.o, &gpu.lse, &gpu.dq, &gpu.dk, &gpu.dv};
    for (int t = 0; t < 5; ++t) {
      std::size_t first = 0;
      const long long n = differing(*cv[t], *gv[t], &first);
      elements += static_cast<long long>(cv[t]->size());
      if (n) {
        char b[200];
        std::snprintf(b, sizeof b, " %s: %lld differ (first at %zu: cpu %.9g gpu %.9g);", names[t], n, first,
                      first < cv[t]->size() ? (*cv[t])[first] : NAN, first < gv[t]->size() ? (*gv[t])[first] : NAN);
        why += b;
      }
    }
    for (std::size_t h = 0; h < cpu.heads.size(); ++h) {
      const HeadCounters &a = cpu.heads[h], &g = gpu.heads[h];
      const bool counts = a.rows == g.rows && a.repeated_max_rows == g.repeated_max_rows &&
                          a.tile_repeated_max_rows == g.tile_repeated_max_rows &&
                          a.zero_max_repeated_rows == g.zero_max_repeated_rows && a.pbar_one_entries == g.pbar_one_entries &&
                          a.fix_engaged_rows == g.fix_engaged_rows && a.logit_max == g.logit_max;
      const double on = static_cast<double>(a.o_err_count), dn = static_cast<double>(a.delta_err_count);
      const bool errs = a.o_err_count == g.o_err_count && close_sum(a.o_err_sum, g.o_err_sum, on, a.o_err_sumsq, 1e-9) &&
                        close_rel(a.o_err_sumsq, g.o_err_sumsq, 1e-9) && close_count(a.o_err_pos, g.o_err_pos, 1e-3) &&
                        close_count(a.o_err_neg, g.o_err_neg, 1e-3) && a.delta_err_count == g.delta_err_count &&
                        close_sum(a.delta_err_sum, g.delta_err_sum, dn, a.delta_err_sumsq, 1e-5) &&
                        close_rel(a.delta_err_sumsq, g.delta_err_sumsq, 1e-5) && close_count(a.delta_err_pos, g.delta_err_pos, 1e-2) &&
                        close_count(a.delta_err_neg, g.delta_err_neg, 1e-2);
      if (!counts || !errs) {
        char b[900];
        std::snprintf(b, sizeof b,
                      " head %zu %s: rows %lld/%lld rep %lld/%lld tile %lld/%lld zero %lld/%lld one %lld/%lld fix %lld/%lld "
                      "logit %.9g/%.9g o_err sum %.12g/%.12g sumsq %.12g/%.12g n %lld/%lld +- %lld/%lld %lld/%lld d_err sum "
                      "%.12g/%.12g sumsq %.12g/%.12g +- %lld/%lld %lld/%lld;",
                      h, counts ? "errors" : "counters", (long long)a.rows, (long long)g.rows, (long long)a.repeated_max_rows,
                      (long long)g.repeated_max_rows, (long long)a.tile_repeated_max_rows, (long long)g.tile_repeated_max_rows,
                      (long long)a.zero_max_repeated_rows, (long long)g.zero_max_repeated_rows, (long long)a.pbar_one_entries,
                      (long long)g.pbar_one_entries, (long long)a.fix_engaged_rows, (long long)g.fix_engaged_rows, a.logit_max,
                      g.logit_max, a.o_err_sum, g.o_err_sum, a.o_err_sumsq, g.o_err_sumsq, (long long)a.o_err_count,
                      (long long)g.o_err_count, (long long)a.o_err_pos, (long long)g.o_err_pos, (long long)a.o_err_neg,
                      (long long)g.o_err_neg, a.delta_err_sum, g.delta_err_sum, a.delta_err_sumsq, g.delta_err_sumsq,
                      (long long)a.delta_err_pos, (long long)g.delta_err_pos, (long long)a.delta_err_neg, (long long)g.delta_err_neg);
        why += b;
        break;
      }
    }
    failures += !why.empty();
    std::printf("%-60s %s%s\n", c.name.c_str(), why.empty() ? "identical" : "FAIL", why.c_str());
    std::fflush(stdout);
  }
  std::printf("%d of %zu cases FAILED; %lld output elements compared\n", failures, cases.size(), elements);
  return failures ? 1 : 0;
}
