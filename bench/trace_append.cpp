// Trace writer throughput for a GPT-2-small layout (12 layers x 12 heads, 50 matrices):
// microseconds per record and bytes per record, flushing every record and every 100 records.
// Baseline in the same run: the same payload appended with fwrite to a flat binary file.
//   bench_trace_append [records] [dir]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "lpdiag/trace/trace_writer.hpp"

using namespace lpdiag;
using Clock = std::chrono::steady_clock;

static TraceLayout gpt2_small_layout() {
  TraceLayout L;
  for (int l = 0; l < 12; ++l) {
    const std::string p = "transformer.h." + std::to_string(l);
    L.attention.push_back({p + ".attn", l, 12, 64, "fa2", "{}"});
    for (const char* role : {"attn_q", "attn_k", "attn_v", "attn_o"})
      L.matrices.push_back({p + "." + role, role, l, 768, 768,
                            std::string(role) == "attn_q" || std::string(role) == "attn_k" ? 12 : 0, p});
    L.activations.push_back({p, l});
  }
  L.matrices.push_back({"transformer.wte", "embedding", -1, 50257, 768, 0, "transformer.wte.weight"});
  L.matrices.push_back({"lm_head", "lm_head", -1, 50257, 768, 0, "lm_head.weight"});
  return L;
}

static TraceRecord filled(const TraceLayout& L, std::int64_t step) {
  TraceRecord r = TraceRecord::unmeasured(L, step);
  for (auto& s : r.scalars) s = 1.0 / double(step + 1);
  for (auto& layer : r.attention)
    for (auto& h : layer) {
      h = HeadCounters{};
      h.rows = 16384 + step;
      h.o_err_sum = 1e-3 * double(step);
      h.logit_max = float(step);
    }
  for (auto& w : r.weights) {
    w.spectral_norm = w.frobenius_norm = w.stable_rank = double(step);
    for (auto& x : w.head_spectral_norm) x = double(step);
  }
  for (auto& u : r.updates) u.sigma1 = u.concentration = u.similarity_prev = 0.5;
  for (auto& a : r.activations) a.max_abs = a.rms = 1.0f;
  return r;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::stoi(argv[1]) : 2000;
  const std::string dir = argc > 2 ? argv[2] : std::filesystem::temp_directory_path().string();
  const TraceLayout L = gpt2_small_layout();
  std::printf("layout: %zu attention layers x 12 heads, %zu matrices, %zu activations; %d records\n",
              L.attention.size(), L.matrices.size(), L.activations.size(), n);
  std::vector<TraceRecord> recs;
  for (int i = 0; i < n; ++i) recs.push_back(filled(L, i));

  // Payload bytes per record, as the trace stores them.
  std::size_t payload = 8 + 8 * L.scalars.size() + 4 * 2 * L.activations.size();
  for (const auto& a : L.attention) payload += std::size_t(a.n_heads) * (12 * 8 + 4 * 8 + 4) ;
  for (const auto& m : L.matrices) payload += 8 * (6 + std::size_t(m.n_heads));
  std::vector<char> blob(payload, 1);
  const std::string flat = dir + "/bench_flat.bin";
  auto t0 = Clock::now();
  FILE* f = std::fopen(flat.c_str(), "wb");
  for (int i = 0; i < n; ++i) {
    std::fwrite(blob.data(), 1, blob.size(), f);
    if ((i + 1) % 100 == 0) std::fflush(f);
  }
  std::fclose(f);
  const double base_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n;
  std::printf("%-34s %10.2f us/record %10zu bytes/record\n", "baseline fwrite (flush every 100)", base_us, payload);

  for (int flush_every : {1, 100}) {
    for (int compression : {0, 4}) {
      // Deflate with a flush per record recompresses every open chunk at every record
      // (~150 ms/record measured at 300 records); not a configuration anyone should run.
      if (flush_every == 1 && compression > 0) continue;
      const std::string path = dir + "/bench_trace.h5";
      TraceWriterOptions opt;
      opt.flush_every = flush_every;
      opt.compression = compression;
      double us = 0;
      {
        TraceWriter w(path, L, {}, opt);
        auto t1 = Clock::now();
        for (const auto& r : recs) w.append(r);
        w.flush();
        us = std::chrono::duration<double, std::micro>(Clock::now() - t1).count() / n;
      }
      const auto bytes = std::filesystem::file_size(path);
      std::printf("trace flush_every=%-3d deflate=%d    %10.2f us/record %10.0f bytes/record  (%.1fx baseline)\n",
                  flush_every, compression, us, double(bytes) / n, us / base_us);
    }
  }
  return 0;
}
