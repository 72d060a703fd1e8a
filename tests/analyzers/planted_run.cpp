#include "planted_run.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "lpdiag/trace/trace_writer.hpp"

namespace lpdiag_test {

using namespace lpdiag;

analysis::ChainResult chain_of(const std::string& path, unsigned seed, const PlantedRun& run) {
  constexpr int L = PlantedRun::kLayers, H = PlantedRun::kHeads, R = PlantedRun::kRecords, rows = PlantedRun::kRows;
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  TraceLayout layout;
  for (int l = 0; l < L; ++l) {
    layout.attention.push_back({"a" + std::to_string(l), l, H, 64, "fa2", R"({"kind":"none"})", ""});
    layout.matrices.push_back({"h." + std::to_string(l) + ".q", "attn_q", l, H * 64, H * 64, H, "test"});
  }
  {
    TraceWriter w(path, layout);
    double level = 0;                        // the bias's wandering size (AR(1))
    std::vector<double> grown(L * H, 0.0);  // the log sigma_1 each head has grown by
    const double sd = 1e-3;
    for (int r = 0; r < R; ++r) {
      level = 0.97 * level + std::sqrt(1 - 0.97 * 0.97) * g(rng);
      TraceRecord rec = TraceRecord::unmeasured(layout, r);
      const double loss = r < PlantedRun::kExplodesAt ? 3.0 - 1.0 * r / R + 0.01 * g(rng) : 3.0 + 0.2 * (r - PlantedRun::kExplodesAt);
      rec.scalars = {loss, 1e-3, 1.0};
      for (int l = 0; l < L; ++l) {
        auto& ws = rec.weights[static_cast<std::size_t>(l)];
        for (int h = 0; h < H; ++h) {
          auto& c = rec.attention[static_cast<std::size_t>(l)][static_cast<std::size_t>(h)];
          c = HeadCounters{};
          c.rows = rows;
          c.repeated_max_rows = std::binomial_distribution<std::int64_t>(rows, run.repeated_rate(l, h, r))(rng);
          const double z = run.biased(l, h, r) ? 8.0 * std::max(0.2, 1.0 + 0.4 * level) + 0.5 * g(rng) : 0.0;
          const double mu = z * sd / std::sqrt(double(rows));
          c.delta_err_count = rows;
          c.delta_err_sum = rows * mu + std::sqrt(double(rows)) * sd * g(rng);
          c.delta_err_sumsq = rows * (sd * sd + mu * mu);
          c.delta_err_pos = c.delta_err_neg = rows / 2;
          double& gr = grown[static_cast<std::size_t>(l * H + h)];
          gr += run.growth(l, h, r, z);
          ws.head_spectral_norm[static_cast<std::size_t>(h)] = std::exp(std::log(1.0 + 0.2 * h) + gr) * (1 + 0.003 * g(rng));
        }
        ws.spectral_norm = 3, ws.frobenius_norm = 4, ws.stable_rank = 2;
        auto& u = rec.updates[static_cast<std::size_t>(l)];
        const bool aligned = run.aligned(l, r);
        u.concentration = std::clamp((aligned ? 0.8 : 0.15) + 0.03 * g(rng), 0.0, 1.0);
        u.similarity_prev = std::clamp((aligned ? run.aligned_similarity(l) : 0.2) + 0.05 * g(rng), 0.0, 1.0);
        u.sigma1 = 1e-3 * (1 + 0.1 * g(rng));
      }
      w.append(rec);
    }
  }
  return analysis::reconstruct_chain(analysis::bin_traces({path}));
}

void print_chain(const char* what, const analysis::ChainResult& c) {
  std::printf("  %s:\n", what);
  for (const auto& l : c.links)
    std::printf("    %s present %d layer %lld head %lld onset %lld: %s\n", l.id.c_str(), int(l.present), (long long)l.layer_index,
                (long long)l.head, (long long)l.onset_step, l.evidence.c_str());
  for (const auto& f : c.findings) std::printf("    - %s\n", f.c_str());
}

}  // namespace lpdiag_test
