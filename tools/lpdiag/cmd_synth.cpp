// `lpdiag synth OUT.h5 --kind K [--seed S] ...`: synthetic traces in format v1.
#include <fmt/core.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "lpdiag/analyzers/synth.hpp"
#include "lpdiag/command.hpp"

namespace lpdiag::cli {
namespace {

struct SynthArgs {
  std::string path;
  std::string kind = "chain";
  std::uint64_t seed = 1;
  std::int64_t records = 0;
  int layers = 0, heads = 0, ranks = 1;
  double gaps = 0.02;
  int flush_every = 256, delay_us = 0;
  bool json = false;
  bool steady_bias = false;
};

int run_synth(const SynthArgs& a) {
  analysis::SynthOptions o;
  o.kind = analysis::parse_synth_kind(a.kind);
  o.seed = a.seed;
  o.records = a.records;
  o.layers = a.layers;
  o.heads = a.heads;
  o.ranks = a.ranks;
  o.gap_fraction = a.gaps;
  o.flush_every = a.flush_every;
  o.record_delay_us = a.delay_us;
  o.steady_bias = a.steady_bias;
  const analysis::SynthTruth t = analysis::write_synth_trace(a.path, o);
  nlohmann::json j{{"files", t.files}, {"kind", a.kind}, {"seed", a.seed}, {"first_step", t.first_step}, {"last_step", t.last_step}};
  j["layer_index"] = t.layer_index >= 0 ? nlohmann::json(t.layer_index) : nlohmann::json(nullptr);
  j["head"] = t.head >= 0 ? nlohmann::json(t.head) : nlohmann::json(nullptr);
  for (int k = 0; k < 5; ++k)
    j["onsets"]["C" + std::to_string(k + 1)] = t.onset_step[k] >= 0 ? nlohmann::json(t.onset_step[k]) : nlohmann::json(nullptr);
  if (a.json) std::cout << j.dump(2) << "\n";
  else std::cout << fmt::format("wrote {} ({}): planted {}\n", fmt::format("{}", t.files.front()), a.kind, j["onsets"].dump());
  return kOk;
}

}  // namespace

Registration register_synth(CLI::App& app) {
  auto args = std::make_shared<SynthArgs>();
  CLI::App* sub = app.add_subcommand("synth", "Write a synthetic trace: a planted chain or a null case");
  sub->add_option("output", args->path, "Output trace (.h5)")->required();
  sub->add_option("--kind", args->kind, "chain, loss-spike, growth-no-trigger, bias-no-growth, clean or undriven (every link, growth of its own)")->capture_default_str();
  sub->add_option("--seed", args->seed, "Random seed (layer, head, onsets, magnitudes, noise)")->capture_default_str();
  sub->add_option("--records", args->records, "Records (0: random 1500..3000)")->capture_default_str();
  sub->add_option("--layers", args->layers, "Attention layers (0: random 2..4)")->capture_default_str();
  sub->add_option("--heads", args->heads, "Heads per layer (0: random 4..8)")->capture_default_str();
  sub->add_option("--ranks", args->ranks, "Write this many rank files of one run")->capture_default_str();
  sub->add_option("--gaps", args->gaps, "Fraction of records with unmeasured signals")->capture_default_str();
  sub->add_option("--flush-every", args->flush_every, "Records per flush")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--delay-us", args->delay_us, "Sleep after each record (simulates a live run for 'lpdiag watch')")->capture_default_str();
  sub->add_flag("--steady-bias", args->steady_bias, "The bias does not wander (a chain whose driving cannot be tested)");
  sub->add_flag("--json", args->json, "Print what was planted as JSON");
  return {sub, [args] { return run_synth(*args); }};
}

}  // namespace lpdiag::cli
