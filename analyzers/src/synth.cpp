#include "lpdiag/analyzers/synth.hpp"

#include <cmath>
#include <memory>
#include <chrono>
#include <random>
#include <thread>

#include "lpdiag/error.hpp"
#include "lpdiag/trace/trace_writer.hpp"

namespace lpdiag::analysis {

const char* synth_kind_name(SynthKind k) {
  switch (k) {
    case SynthKind::chain: return "chain";
    case SynthKind::loss_spike: return "loss-spike";
    case SynthKind::growth_no_trigger: return "growth-no-trigger";
    case SynthKind::bias_no_growth: return "bias-no-growth";
    case SynthKind::clean: return "clean";
    case SynthKind::undriven: return "undriven";
  }
  return "?";
}

SynthKind parse_synth_kind(const std::string& name) {
  for (SynthKind k : {SynthKind::chain, SynthKind::loss_spike, SynthKind::growth_no_trigger, SynthKind::bias_no_growth, SynthKind::clean,
                      SynthKind::undriven})
    if (name == synth_kind_name(k)) return k;
  throw InvalidArgument("unknown synthetic trace kind '" + name + "'; expected chain, loss-spike, growth-no-trigger, bias-no-growth, clean or undriven");
}

namespace {

std::string rank_path(const std::string& path, int rank, int ranks) {
  if (ranks == 1) return path;
  const std::string stem = path.size() > 3 && path.substr(path.size() - 3) == ".h5" ? path.substr(0, path.size() - 3) : path;
  return stem + ".rank" + std::to_string(rank) + ".h5";
}

}  // namespace

SynthTruth write_synth_trace(const std::string& path, const SynthOptions& opt) {
  if (opt.ranks < 1 || opt.ranks > 64) throw InvalidArgument("synth: ranks must be 1..64");
  std::mt19937_64 rng(opt.seed);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  std::normal_distribution<double> G(0.0, 1.0);
  auto uni = [&](double a, double b) { return a + (b - a) * U(rng); };

  const int L = opt.layers > 0 ? opt.layers : 2 + static_cast<int>(rng() % 3);
  const int H = opt.heads > 0 ? opt.heads : 4 + static_cast<int>(rng() % 5);
  const std::int64_t T = opt.records > 0 ? opt.records : 1500 + static_cast<std::int64_t>(rng() % 1501);
  const int stride_max = opt.irregular_stride ? 3 : 1;

  SynthTruth truth;
  truth.kind = opt.kind;
  const int pl = static_cast<int>(rng() % L), ph = static_cast<int>(rng() % H);
  // Planted onsets as record indices (converted to steps below), -1 when absent.
  std::array<std::int64_t, 5> at{-1, -1, -1, -1, -1};
  const double f1 = uni(0.2, 0.35);
  const double f2 = f1 + uni(0.02, 0.08), f3 = f2 + uni(0.02, 0.08), f4 = f3 + uni(0.02, 0.08);
  const double f5 = f4 + uni(0.1, 0.2);
  auto rec = [&](double f) { return static_cast<std::int64_t>(f * double(T)); };
  switch (opt.kind) {
    case SynthKind::chain:
    case SynthKind::undriven: at = {rec(f1), rec(f2), rec(f3), rec(f4), rec(f5)}; break;
    case SynthKind::loss_spike: at[4] = rec(uni(0.5, 0.85)); break;
    case SynthKind::growth_no_trigger: at[3] = rec(uni(0.35, 0.6)); at[4] = rec(uni(0.85, 0.92)); break;
    case SynthKind::bias_no_growth: at[0] = rec(f1); at[1] = rec(f2); at[2] = rec(f3); break;
    case SynthKind::clean: break;
  }
  const bool planted_head = at[0] >= 0 || at[1] >= 0 || at[3] >= 0;
  if (planted_head) truth.layer_index = pl, truth.head = ph;

  // Magnitudes.
  const double p0 = uni(0.0005, 0.003), a1 = uni(0.02, 0.15);
  const double sd_d = 1e-3, bias_z = uni(0.8, 2.0) * (U(rng) < 0.5 ? -1 : 1);
  const double growth = std::log(uni(2.0, 5.0));
  const double kappa = at[3] >= 0 ? growth / (std::fabs(bias_z) * double(T - at[3])) : 0.0;
  const double auto_rate = at[3] >= 0 ? growth / double(T - at[3]) : 0.0;

  TraceLayout layout;
  for (int l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".attn";
    layout.attention.push_back({p, l, H, 64, "fa2", R"({"kind":"none"})"});
    layout.matrices.push_back({p + ".q", "attn_q", l, H * 64, H * 64, H, p + ".c_attn.weight[0:" + std::to_string(H * 64) + "]"});
    layout.matrices.push_back({p + ".k", "attn_k", l, H * 64, H * 64, H, p + ".c_attn.weight[" + std::to_string(H * 64) + ":]"});
    layout.activations.push_back({"model.layers." + std::to_string(l), l});
  }
  std::vector<std::unique_ptr<TraceWriter>> writers;
  for (int r = 0; r < opt.ranks; ++r) {
    TraceHeader hdr;
    hdr.producer = "lpdiag synth 0.1.0";
    hdr.run_config = std::string(R"({"synthetic":")") + synth_kind_name(opt.kind) + R"(","seed":)" + std::to_string(opt.seed) +
                     R"(,"n_layer":)" + std::to_string(L) + R"(,"n_head":)" + std::to_string(H) + "}";
    hdr.rank = r;
    hdr.world_size = opt.ranks;
    TraceWriterOptions wo;
    wo.flush_every = opt.flush_every;
    wo.chunk_rows = 1024;
    wo.compression = opt.compression;
    truth.files.push_back(rank_path(path, r, opt.ranks));
    writers.push_back(std::make_unique<TraceWriter>(truth.files.back(), layout, hdr, wo));
  }

  std::vector<double> sigma0(static_cast<std::size_t>(L * H)), log_sigma(static_cast<std::size_t>(L * H));
  for (std::size_t i = 0; i < sigma0.size(); ++i) sigma0[i] = uni(0.8, 2.0), log_sigma[i] = std::log(sigma0[i]);
  std::vector<double> conc0(static_cast<std::size_t>(L)), sim0(static_cast<std::size_t>(L));
  for (int l = 0; l < L; ++l) conc0[l] = uni(0.05, 0.25), sim0[l] = uni(0.05, 0.3);
  const double conc1 = uni(0.6, 0.9), sim1 = uni(0.85, 0.98);
  const double rows = 1024.0 / opt.ranks;

  // The bias's size wanders slowly (an AR(1) process over records, correlation time ~30
  // records, relative s.d. 0.4), as a bias that depends on the data and the weights does; the
  // growth it drives rises and falls with it, which is what the chain analysis tests. A steady
  // bias would leave only the order of the links, which growth of any later cause also shows.
  // An undriven trace's growth wanders the same way, independently.
  auto wandering = [&](bool steady) {
    std::vector<double> level(static_cast<std::size_t>(T), 1.0);
    const double phi = 0.97;
    double a = G(rng);
    for (auto& v : level) {
      a = phi * a + std::sqrt(1 - phi * phi) * G(rng);
      if (!steady) v = std::max(0.2, 1.0 + 0.4 * a);
    }
    return level;
  };
  const std::vector<double> level = wandering(opt.steady_bias), own_level = wandering(false);

  std::int64_t step = static_cast<std::int64_t>(rng() % 100);
  double loss_spike_level = 0;
  for (std::int64_t r = 0; r < T; ++r) {
    if (r > 0) step += 1 + static_cast<std::int64_t>(rng() % stride_max);
    if (r == 0) truth.first_step = step;
    for (int k = 0; k < 5; ++k)
      if (at[k] == r) truth.onset_step[k] = step;
    const bool gap = U(rng) < opt.gap_fraction;
    const double f = double(r) / double(T);
    // Loss: a decaying curve; after C5, an explosion that ends in +Inf.
    double loss = 3.0 + 7.0 * std::exp(-5.0 * f) + 0.02 * G(rng);
    if (at[4] >= 0 && r >= at[4]) {
      loss_spike_level += uni(0.5, 1.5);
      loss += 4.0 + loss_spike_level;
      if (r >= T - 3) loss = INFINITY;
    }
    for (int rank = 0; rank < opt.ranks; ++rank) {
      TraceRecord rec_ = TraceRecord::unmeasured(layout, step);
      rec_.scalars[0] = loss;
      rec_.scalars[1] = 1e-3 * std::min(1.0, 10 * f);
      rec_.scalars[2] = 1.0 + 0.1 * G(rng);
      for (int l = 0; l < L; ++l) {
        double qsig2 = 0;
        for (int h = 0; h < H; ++h) {
          const bool planted = l == pl && h == ph;
          const std::size_t i = static_cast<std::size_t>(l * H + h);
          HeadCounters c{};
          c.rows = static_cast<std::int64_t>(rows);
          const double p = p0 + (planted && at[0] >= 0 && r >= at[0] ? a1 : 0.0);
          c.repeated_max_rows = std::max<std::int64_t>(0, std::llround(rows * p + std::sqrt(rows * p * (1 - p)) * G(rng)));
          const double z = planted && at[1] >= 0 && r >= at[1] ? bias_z * level[static_cast<std::size_t>(r)] + 0.5 * G(rng) : 0.0;
          const double mu = z * sd_d / std::sqrt(rows);
          c.delta_err_count = static_cast<std::int64_t>(rows);
          c.delta_err_sum = rows * mu + std::sqrt(rows) * sd_d * G(rng);
          c.delta_err_sumsq = rows * (sd_d * sd_d + mu * mu);
          c.delta_err_pos = c.delta_err_neg = c.delta_err_count / 2;
          c.o_err_count = static_cast<std::int64_t>(rows) * 64;
          c.o_err_sum = 0.25 * mu * double(c.o_err_count) + std::sqrt(double(c.o_err_count)) * sd_d * G(rng);
          c.o_err_sumsq = double(c.o_err_count) * sd_d * sd_d;
          c.logit_max = static_cast<float>(4.0 + 2.0 * std::exp(2 * log_sigma[i]) + 0.1 * G(rng));
          if (!gap) rec_.attention[static_cast<std::size_t>(l)][static_cast<std::size_t>(h)] = c;
          // sigma_1 of the head slice: noise, and growth driven by the bias once C4 starts.
          if (rank == 0) {
            if (planted && at[3] >= 0 && r >= at[3])
              log_sigma[i] += opt.kind == SynthKind::chain      ? kappa * std::max(0.0, z * (bias_z > 0 ? 1 : -1))
                              : opt.kind == SynthKind::undriven ? auto_rate * own_level[static_cast<std::size_t>(r)] * (1 + 0.5 * G(rng))
                                                                : auto_rate * (1 + 0.5 * G(rng));
          }
          const double s = std::exp(log_sigma[i]) * (1 + 0.003 * G(rng));
          if (!gap) rec_.weights[static_cast<std::size_t>(2 * l)].head_spectral_norm[static_cast<std::size_t>(h)] = s;
          qsig2 = std::max(qsig2, s);
        }
        if (!gap) {
          WeightStats& wq = rec_.weights[static_cast<std::size_t>(2 * l)];
          wq.spectral_norm = qsig2 * 1.05;
          wq.frobenius_norm = qsig2 * std::sqrt(double(H));
          wq.stable_rank = double(H) / 1.1;
          const bool aligned = l == pl && at[2] >= 0 && r >= at[2];
          UpdateStats& u = rec_.updates[static_cast<std::size_t>(2 * l)];
          u.concentration = std::clamp((aligned ? conc1 : conc0[l]) + 0.03 * G(rng), 0.0, 1.0);
          u.similarity_prev = std::clamp((aligned ? sim1 : sim0[l]) + 0.05 * G(rng), 0.0, 1.0);
          u.sigma1 = 1e-3 * (1 + 0.1 * G(rng));
          rec_.activations[static_cast<std::size_t>(l)].max_abs = static_cast<float>(10 + G(rng));
          rec_.activations[static_cast<std::size_t>(l)].rms = static_cast<float>(1 + 0.01 * G(rng));
        }
      }
      writers[static_cast<std::size_t>(rank)]->append(rec_);
      if (std::isinf(loss) && r == T - 3)
        writers[static_cast<std::size_t>(rank)]->add_event({step, "nan_inf", -1, -1, loss, "loss is not finite"});
    }
    truth.last_step = step;
    if (opt.record_delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(opt.record_delay_us));
  }
  for (auto& w : writers) {
    w->close();
    if (w->failed()) throw WriteError(w->path() + ": " + w->error());
  }
  return truth;
}

}  // namespace lpdiag::analysis
