// gpu: the tensor-core accumulation, recorded. Runs mma.sync m16n8k16 and (sm_90a) wgmma
// m64n64k16 with A from registers, bf16 x bf16 + fp32 -> fp32, on test vectors built to expose
// how one instruction sums its products and the accumulator (wide random exponents, P-bar V
// shaped inputs, a lone small addend below the accumulator's last bit, many small addends,
// cancellation, a zero accumulator, Q K^T shaped inputs), and writes every instruction's A, B,
// C and D to a file that tests/numerics/test_mma_model.cpp replays through the CPU model.
//   mma_probe OUT.bin [SEED]      record (the seed is printed; default: a fresh one)
//   mma_probe --check [SEED]      record in memory and compare with lpdiag::mma_accumulate
//   mma_probe --ex2 OUT.bin       the MUFU's 2^x against the correctly rounded one (a survey)
//   mma_probe --ex2-table T.bin S.bin SEED   the MUFU's 2^x on [-2, -1] and on seeded samples
// File: "LPMMA001", u64 seed, u32 records; per record u32 kind (0 mma.sync, 1 wgmma), u32
// category, u32 M, u32 N, then A (M x 16) and B (16 x N) as bf16 bits row-major, C and D (M x N)
// as fp32. Exits 77 (skipped) without a device.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "flash/mma.cuh"
#include "to_device.hpp"
#include "flash/tile_copy.cuh"
#include "flash/wgmma.cuh"
#include "lpdiag/numerics/convert.hpp"
#include "lpdiag/numerics/mma_model.hpp"

namespace fl = lpdiag::cuda::flash;

namespace {

constexpr int kCategories = 8;
const char* const kCategoryNames[kCategories] = {"wide",   "pbar-v",   "lone-small", "many-small",
                                                 "cancel", "zero-acc", "qk",         "mixed-sign-small"};

struct Record {
  int kind = 0, category = 0, M = 16, N = 8;
  std::vector<std::uint16_t> a, b;  // M x 16, 16 x N
  std::vector<float> c, d;          // M x N
};

// --- the instructions --------------------------------------------------------------------

__global__ void mma_kernel(const std::uint16_t* a, const std::uint16_t* b, const float* c, float* d, int count) {
  const int inst = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (inst >= count) return;
  a += inst * 256, b += inst * 128, c += inst * 128, d += inst * 128;
  const int r = lane / 4, col = 2 * (lane % 4);
  auto pair = [](std::uint16_t lo, std::uint16_t hi) { return static_cast<std::uint32_t>(lo) | static_cast<std::uint32_t>(hi) << 16; };
  const std::uint32_t af[4] = {pair(a[r * 16 + col], a[r * 16 + col + 1]), pair(a[(r + 8) * 16 + col], a[(r + 8) * 16 + col + 1]),
                               pair(a[r * 16 + col + 8], a[r * 16 + col + 9]),
                               pair(a[(r + 8) * 16 + col + 8], a[(r + 8) * 16 + col + 9])};
  const std::uint32_t b0 = pair(b[col * 8 + r], b[(col + 1) * 8 + r]), b1 = pair(b[(col + 8) * 8 + r], b[(col + 9) * 8 + r]);
  float acc[4] = {c[r * 8 + col], c[r * 8 + col + 1], c[(r + 8) * 8 + col], c[(r + 8) * 8 + col + 1]};
  fl::mma_bf16(acc, af, b0, b1);
  d[r * 8 + col] = acc[0], d[r * 8 + col + 1] = acc[1], d[(r + 8) * 8 + col] = acc[2], d[(r + 8) * 8 + col + 1] = acc[3];
}

// One warpgroup per instruction: D (64 x 64) = A (64 x 16, registers) B (16 x 64, N-major) + C.
__global__ void wgmma_kernel(const std::uint16_t* a, const std::uint16_t* b, const float* c, float* d) {
  extern __shared__ __align__(128) unsigned char raw[];
  auto* bs = reinterpret_cast<__nv_bfloat16*>(fl::align_smem(raw));
  a += blockIdx.x * 1024, b += blockIdx.x * 1024, c += blockIdx.x * 4096, d += blockIdx.x * 4096;
  fl::load_panels<64, 16, 128>(bs, reinterpret_cast<const __nv_bfloat16*>(b), 64, 0, 16);
  fl::cp_async_commit();
  fl::cp_async_wait<0>();
  fl::wg::fence_proxy_async();
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = warp * 16 + lane / 4, col = 2 * (lane % 4);
  auto pair = [](std::uint16_t lo, std::uint16_t hi) { return static_cast<std::uint32_t>(lo) | static_cast<std::uint32_t>(hi) << 16; };
  std::uint32_t af[4] = {pair(a[r * 16 + col], a[r * 16 + col + 1]), pair(a[(r + 8) * 16 + col], a[(r + 8) * 16 + col + 1]),
                         pair(a[r * 16 + col + 8], a[r * 16 + col + 9]), pair(a[(r + 8) * 16 + col + 8], a[(r + 8) * 16 + col + 9])};
  float acc[8][4];
  for (int t = 0; t < 8; ++t)
    for (int e = 0; e < 4; ++e) acc[t][e] = c[(r + 8 * (e / 2)) * 64 + t * 8 + col + (e % 2)];
  fl::wg::fence_operand(acc);
  fl::wg::fence();
  fl::wg::rs_m64n64k16_tb(acc, af, fl::wg::desc_sw128(fl::smem_addr(bs), 64 * fl::wg::kPanelRow));
  fl::wg::commit();
  fl::wg::wait<0>();
  fl::wg::fence_operand(acc);
  for (int t = 0; t < 8; ++t)
    for (int e = 0; e < 4; ++e) d[(r + 8 * (e / 2)) * 64 + t * 8 + col + (e % 2)] = acc[t][e];
}

// 2^x on the MUFU (ex2.approx.ftz.f32) for x = -(bits base + i) reinterpreted.
__global__ void ex2_kernel(std::uint32_t base, std::uint32_t count, std::uint32_t* y) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const std::uint32_t u = 0x80000000u | (base + i);
  float x;
  memcpy(&x, &u, 4);
  const float r = fl::exp2_approx(x);
  memcpy(&y[i], &r, 4);
}

__global__ void ex2_gather_kernel(const std::uint32_t* x, std::uint32_t count, std::uint32_t* y) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const std::uint32_t u = 0x80000000u | x[i];
  float v;
  memcpy(&v, &u, 4);
  const float r = fl::exp2_approx(v);
  memcpy(&y[i], &r, 4);
}

// The MUFU's 2^x against the correctly rounded value, for negative x (the softmax's range):
// every x in [-1, -0.5) written to `path` as int8 (bits(MUFU) - bits(correct)), and a
// histogram of the difference per binade of |x| from 2^-30 to 2^7.
int ex2_survey(const char* path) {
  const std::uint32_t n = 1u << 23;
  std::uint32_t* dy = nullptr;
  cudaMalloc(&dy, n * 4);
  std::vector<std::uint32_t> y(n);
  std::vector<signed char> delta(n);
  for (int e = -30; e <= 7; ++e) {
    const std::uint32_t base = static_cast<std::uint32_t>(e + 127) << 23;
    ex2_kernel<<<n / 256, 256>>>(base, n, dy);
    cudaMemcpy(y.data(), dy, n * 4, cudaMemcpyDeviceToHost);
    long long hist[7] = {};  // <= -3, -2, -1, 0, 1, 2, >= 3
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint32_t u = 0x80000000u | (base + i);
      float x;
      std::memcpy(&x, &u, 4);
      float want = static_cast<float>(exp2l(static_cast<long double>(x)));
      if (want < 1.17549435e-38f) want = 0.0f;
      std::uint32_t w;
      std::memcpy(&w, &want, 4);
      const long long dlt = static_cast<long long>(y[i]) - static_cast<long long>(w);
      hist[dlt <= -3 ? 0 : dlt >= 3 ? 6 : dlt + 3] += 1;
      if (e == -1) delta[i] = static_cast<signed char>(dlt < -127 ? -127 : dlt > 127 ? 127 : dlt);
    }
    std::printf("ex2 |x| in [2^%d, 2^%d): ulps vs correct <=-3:%lld -2:%lld -1:%lld 0:%lld +1:%lld +2:%lld >=3:%lld\n", e,
                e + 1, hist[0], hist[1], hist[2], hist[3], hist[4], hist[5], hist[6]);
  }
  cudaFree(dy);
  FILE* f = std::fopen(path, "wb");
  if (!f) return 2;
  std::fwrite(delta.data(), 1, n, f);
  std::fclose(f);
  return 0;
}

// The MUFU's 2^x for every x in [-2, -1] (2^23 + 1 values: every 23-bit fraction) as raw bits,
// and for 2^21 sample x drawn from mt19937_64(seed) (exponent of |x| uniform in [-30, 7],
// random significand), so a CPU model of ex2.approx can be built and checked offline.
int ex2_table(const char* table_path, const char* sample_path, std::uint64_t seed) {
  const std::uint32_t n = (1u << 23) + 1;
  std::uint32_t* dy = nullptr;
  cudaMalloc(&dy, n * 4);
  std::vector<std::uint32_t> y(n);
  ex2_kernel<<<(n + 255) / 256, 256>>>(0x3F800000u, n, dy);  // -(1.0 .. 2.0)
  cudaMemcpy(y.data(), dy, n * 4, cudaMemcpyDeviceToHost);
  FILE* f = std::fopen(table_path, "wb");
  if (!f) return 2;
  std::fwrite(y.data(), 4, n, f);
  std::fclose(f);
  const std::uint32_t m = 1u << 21;
  std::vector<std::uint32_t> xs(m);
  std::mt19937_64 rng(seed);
  for (auto& x : xs) {
    const std::uint64_t r = rng();
    const int e = -30 + static_cast<int>((r >> 23) % 38);
    x = static_cast<std::uint32_t>(e + 127) << 23 | static_cast<std::uint32_t>(r & 0x7FFFFF);  // |x|; the kernel negates
  }
  std::uint32_t* dx = nullptr;
  cudaMalloc(&dx, m * 4);
  std::vector<std::uint32_t> ys(m);
  cudaMemcpy(dx, xs.data(), m * 4, cudaMemcpyHostToDevice);
  ex2_gather_kernel<<<m / 256, 256>>>(dx, m, dy);
  cudaMemcpy(ys.data(), dy, m * 4, cudaMemcpyDeviceToHost);
  cudaFree(dx);
  cudaFree(dy);
  f = std::fopen(sample_path, "wb");
  if (!f) return 2;
  std::fwrite(&seed, 8, 1, f);
  std::fwrite(ys.data(), 4, m, f);
  std::fclose(f);
  std::printf("ex2 table (2^23 + 1 values) and %u samples (seed %llu) written\n", m, static_cast<unsigned long long>(seed));
  return 0;
}

// --- the test vectors -----------------------------------------------------------------------

std::uint16_t bf_bits(float x) { return lpdiag::bf16_bits_rne(x); }

struct Gen {
  std::mt19937_64 rng;
  explicit Gen(std::uint64_t seed) : rng(seed) {}
  double uni(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
  float sign() { return rng() & 1 ? -1.f : 1.f; }
  float normal() { return std::normal_distribution<float>()(rng); }
  // A random value with a random 23-bit significand and the given exponent.
  float with_exp(int e) { return std::ldexp(1.0f + static_cast<float>(rng() & 0x7FFFFF) / 8388608.f, e); }
  float bf_with_exp(int e) { return lpdiag::round_bf16(std::ldexp(1.0f + static_cast<float>(rng() & 0x7F) / 128.f, e)); }
};

// Fills one instruction's inputs for a category; M rows, N columns, K = 16.
void fill(Record& r, Gen& g) {
  const int M = r.M, N = r.N;
  r.a.assign(M * 16, 0), r.b.assign(16 * N, 0), r.c.assign(M * N, 0.f);
  std::vector<float> a(M * 16, 0.f), b(16 * N, 0.f);
  switch (r.category) {
    case 0:  // wide exponents everywhere
      for (auto& x : a) x = g.sign() * g.bf_with_exp(g.pick(-10, 10));
      for (auto& x : b) x = g.sign() * g.bf_with_exp(g.pick(-10, 10));
      for (auto& x : r.c) x = g.sign() * g.with_exp(g.pick(-14, 14));
      break;
    case 1:  // P-bar V: A = bf16(exp(-u)) with exact ones, B ~ N(0,1) or [-2,-1), C a running O sum
      for (auto& x : a) x = g.pick(0, 7) == 0 ? 1.f : lpdiag::round_bf16(std::exp(-static_cast<float>(g.uni(0, 26))));
      for (int k = 0; k < 16; ++k)
        for (int n = 0; n < N; ++n) b[k * N + n] = lpdiag::round_bf16(n % 2 ? g.normal() : static_cast<float>(g.uni(-2, -1)));
      for (auto& x : r.c) x = g.sign() * static_cast<float>(g.uni(0.25, 8));
      break;
    case 2:  // one product 2^-(18..34) relative to C, the rest zero
      for (int m = 0; m < M; ++m) {
        const int k = g.pick(0, 15);
        a[m * 16 + k] = g.sign() * g.bf_with_exp(-g.pick(18, 34));
      }
      for (auto& x : b) x = g.sign() * g.bf_with_exp(0);
      for (auto& x : r.c) x = g.sign() * g.with_exp(0);
      break;
    case 3:  // all sixteen products far below C, one sign per row
      for (int m = 0; m < M; ++m) {
        const float s = g.sign();
        const int e = -g.pick(18, 30);
        for (int k = 0; k < 16; ++k) a[m * 16 + k] = s * g.bf_with_exp(e - g.pick(0, 3));
      }
      for (auto& x : b) x = g.bf_with_exp(0);
      for (auto& x : r.c) x = g.sign() * g.with_exp(g.pick(-1, 1));
      break;
    case 4:  // cancellation: product 0 nearly cancels C, the others small
      for (int m = 0; m < M; ++m) {
        for (int k = 1; k < 16; ++k) a[m * 16 + k] = g.sign() * g.bf_with_exp(-g.pick(6, 20));
        a[m * 16] = g.bf_with_exp(0);
      }
      for (auto& x : b) x = g.sign() * g.bf_with_exp(0);
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
          const float p = lpdiag::round_bf16(a[m * 16]) * b[n];
          r.c[m * N + n] = -p + g.sign() * std::ldexp(static_cast<float>(g.uni(0, 1)), -g.pick(2, 12));
        }
      break;
    case 5:  // zero accumulator, wide products
      for (auto& x : a) x = g.sign() * g.bf_with_exp(g.pick(-12, 12));
      for (auto& x : b) x = g.sign() * g.bf_with_exp(g.pick(-12, 12));
      break;
    case 6:  // Q K^T: N(0,1) x N(0,1) plus a previous chunk's sum
      for (auto& x : a) x = lpdiag::round_bf16(g.normal());
      for (auto& x : b) x = lpdiag::round_bf16(g.normal());
      for (auto& x : r.c) x = 4.f * g.normal();
      break;
    default:  // mixed-sign products just below C's last bit
      for (auto& x : a) x = g.sign() * g.bf_with_exp(-g.pick(20, 27));
      for (auto& x : b) x = g.sign() * g.bf_with_exp(0);
      for (auto& x : r.c) x = g.sign() * g.with_exp(0);
      break;
  }
  for (int i = 0; i < M * 16; ++i) r.a[i] = bf_bits(a[i]);
  for (int i = 0; i < 16 * N; ++i) r.b[i] = bf_bits(b[i]);
}

// Runs every record of one kind on the device and fills r.d.
void run(std::vector<Record>& recs, int kind) {
  std::vector<std::uint16_t> a, b;
  std::vector<float> c;
  std::vector<Record*> mine;
  for (auto& r : recs)
    if (r.kind == kind) {
      mine.push_back(&r);
      a.insert(a.end(), r.a.begin(), r.a.end());
      b.insert(b.end(), r.b.begin(), r.b.end());
      c.insert(c.end(), r.c.begin(), r.c.end());
    }
  if (mine.empty()) return;
  auto *da = to_device(a), *db = to_device(b);
  float* dc = to_device(c);
  float* dd = nullptr;
  cudaMalloc(&dd, c.size() * sizeof(float));
  const int n = static_cast<int>(mine.size());
  if (kind == 0) {
    mma_kernel<<<(n + 3) / 4, 128>>>(da, db, dc, dd, n);
  } else {
    const int smem = 16 * 64 * 2 + fl::kSmemAlign;
    cudaFuncSetAttribute(wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    wgmma_kernel<<<n, 128, smem>>>(da, db, dc, dd);
  }
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::fprintf(stderr, "kernel failed: %s\n", cudaGetErrorString(err));
    std::exit(2);
  }
  std::vector<float> d(c.size());
  cudaMemcpy(d.data(), dd, d.size() * sizeof(float), cudaMemcpyDeviceToHost);
  std::size_t off = 0;
  for (Record* r : mine) {
    r->d.assign(d.begin() + off, d.begin() + off + r->c.size());
    off += r->c.size();
  }
  cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dd);
}

bool wgmma_here() {
#ifdef LPDIAG_HAVE_SM90A
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  return major == 9 && minor == 0;
#else
  return false;
#endif
}

std::vector<Record> record(std::uint64_t seed, int mma_per_cat, int wgmma_per_cat) {
  Gen g(seed);
  std::vector<Record> recs;
  const bool wg = wgmma_here();
  for (int cat = 0; cat < kCategories; ++cat) {
    for (int i = 0; i < mma_per_cat; ++i) {
      Record r;
      r.category = cat;
      fill(r, g);
      recs.push_back(std::move(r));
    }
    for (int i = 0; wg && i < wgmma_per_cat; ++i) {
      Record r;
      r.kind = 1, r.category = cat, r.M = 64, r.N = 64;
      fill(r, g);
      recs.push_back(std::move(r));
    }
  }
  run(recs, 0);
  run(recs, 1);
  return recs;
}

// The model's D for one record.
std::vector<float> model(const Record& r) {
  std::vector<float> d(r.c.size());
  float p[16], q[16];
  for (int m = 0; m < r.M; ++m)
    for (int n = 0; n < r.N; ++n) {
      for (int k = 0; k < 16; ++k) {
        p[k] = lpdiag::bf16_to_float(r.a[m * 16 + k]);
        q[k] = lpdiag::bf16_to_float(r.b[k * r.N + n]);
      }
      d[m * r.N + n] = lpdiag::mma_accumulate(r.c[m * r.N + n], p, q, 16);
    }
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("SKIP: no CUDA device visible");
    return 77;
  }
  if (argc > 2 && std::string(argv[1]) == "--ex2") return ex2_survey(argv[2]);
  if (argc > 4 && std::string(argv[1]) == "--ex2-table") return ex2_table(argv[2], argv[3], std::stoull(argv[4]));
  const bool check = argc > 1 && std::string(argv[1]) == "--check";
  if (argc < 2) {
    std::fprintf(stderr, "usage: mma_probe OUT.bin [SEED] | mma_probe --check [SEED]\n");
    return 2;
  }
  const std::uint64_t seed = argc > 2 ? std::stoull(argv[2]) : std::random_device{}() * 0x9E3779B97F4A7C15ull;
  std::printf("seed %llu, wgmma %s\n", static_cast<unsigned long long>(seed), wgmma_here() ? "yes" : "no (not sm_90a)");
  const std::vector<Record> recs = record(seed, check ? 256 : 512, check ? 16 : 32);
  if (!check) {
    FILE* f = std::fopen(argv[1], "wb");
    if (!f) {
      std::perror(argv[1]);
      return 2;
    }
    const std::uint32_t n = static_cast<std::uint32_t>(recs.size());
    std::fwrite("LPMMA001", 1, 8, f);
    std::fwrite(&seed, 8, 1, f);
    std::fwrite(&n, 4, 1, f);
    for (const auto& r : recs) {
      const std::uint32_t h[4] = {static_cast<std::uint32_t>(r.kind), static_cast<std::uint32_t>(r.category),
                                  static_cast<std::uint32_t>(r.M), static_cast<std::uint32_t>(r.N)};
      std::fwrite(h, 4, 4, f);
      std::fwrite(r.a.data(), 2, r.a.size(), f);
      std::fwrite(r.b.data(), 2, r.b.size(), f);
      std::fwrite(r.c.data(), 4, r.c.size(), f);
      std::fwrite(r.d.data(), 4, r.d.size(), f);
    }
    std::fclose(f);
    std::printf("%u instructions written to %s\n", n, argv[1]);
    return 0;
  }
  long long bad[2][kCategories] = {}, total[2][kCategories] = {};
  for (const auto& r : recs) {
    const auto want = model(r);
    for (std::size_t i = 0; i < want.size(); ++i) {
      std::uint32_t x, y;
      std::memcpy(&x, &want[i], 4);
      std::memcpy(&y, &r.d[i], 4);
      bad[r.kind][r.category] += x != y;
      total[r.kind][r.category] += 1;
    }
  }
  long long all_bad = 0;
  for (int k = 0; k < 2; ++k)
    for (int c = 0; c < kCategories; ++c) {
      if (!total[k][c]) continue;
      std::printf("%-8s %-17s %8lld of %9lld results differ from the model\n", k ? "wgmma" : "mma.sync", kCategoryNames[c],
                  bad[k][c], total[k][c]);
      all_bad += bad[k][c];
    }
  std::puts(all_bad ? "FAIL: the MMA model does not match this device" : "ok: every result bit-identical to the model");
  return all_bad ? 1 : 0;
}
