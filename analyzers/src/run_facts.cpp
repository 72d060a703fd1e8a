#include "lpdiag/analyzers/run_facts.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <set>

#include "lpdiag/trace/trace_reader.hpp"
#include "lpdiag/trace/trace_schema.hpp"

namespace lpdiag::analysis {
namespace {

// The run_config keys that name the attention numerics under comparison.
constexpr const char* kAttentionKeys[] = {"attention", "policy", "fix", "precision"};
// Those, and the keys that say how the run was observed rather than how it trained.
const std::set<std::string> kNotTrainingKeys = [] {
  std::set<std::string> k(std::begin(kAttentionKeys), std::end(kAttentionKeys));
  k.insert({"instrument", "level", "full_every", "observe_every", "producer", "out", "trace", "spec", "alarm"});
  return k;
}();

// The learning rates of two runs that follow one schedule agree to rounding; 1e-6 relative
// leaves room for a schedule computed in another precision, far below any real lr difference.
constexpr double kLrTolerance = 1e-6;
// The first loss of one model, initialisation and data under two attention numerics differs by
// their rounding (bf16 against fp32 attention: 1e-3 relative at GPT-2 small); 2% is well above
// that and well below the change another learning problem makes.
constexpr double kFirstLossTolerance = 0.02;

std::string fmt_num(double x) { return fmt::format("{:.4g}", x); }

}  // namespace

RunFacts RunFacts::from_config(std::string run_config) {
  RunFacts f;
  f.run_config = std::move(run_config);
  return f;
}

RunFacts read_run_facts(const std::string& path) {
  const TraceReader r(path);
  RunFacts f;
  f.path = path;
  f.run_config = r.meta().run_config;
  auto layers = r.layout().attention;
  std::sort(layers.begin(), layers.end(), [](const auto& a, const auto& b) { return a.layer_index < b.layer_index; });
  std::string shape;
  for (const auto& a : layers) {
    f.layer_numerics.push_back(a.policy + " " + a.fix);
    // The whole spec where the trace records it, less the level (how the run was observed, not
    // what the kernel computed).
    auto j = nlohmann::json::parse(a.spec, nullptr, false);
    if (!a.spec.empty() && j.is_object()) j.erase("level");
    f.layer_specs.push_back(!a.spec.empty() && j.is_object() ? j.dump() : std::string());
    shape += fmt::format("{}{}:{}x{}", shape.empty() ? "" : " ", a.layer_index, a.n_heads, a.head_dim);
  }
  if (!layers.empty()) shape = fmt::format("{} attention layers ({})", layers.size(), shape);
  auto mats = r.layout().matrices;
  std::sort(mats.begin(), mats.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::string m;
  for (const auto& x : mats) m += fmt::format("{}{} {}x{}", m.empty() ? "" : ", ", x.role, x.rows, x.cols);
  if (!m.empty()) shape += (shape.empty() ? "" : "; ") + std::string("matrices ") + m;
  f.shape = shape;
  const std::int64_t n = r.records();
  std::vector<double> steps;
  r.read_series(schema::kStepPath, 0, n, steps);
  f.steps.reserve(steps.size());
  for (double s : steps) f.steps.push_back(static_cast<std::int64_t>(s));
  if (!f.steps.empty()) f.first_step = f.steps.front(), f.last_step = f.steps.back();
  if (r.has_series(schema::scalar_path("lr"))) r.read_series(schema::scalar_path("lr"), 0, n, f.lr);
  if (r.has_series(schema::scalar_path("loss"))) r.read_series(schema::scalar_path("loss"), 0, n, f.loss);
  return f;
}

std::vector<std::string> differences_beyond_numerics(const RunFacts& run, const RunFacts& ref) {
  std::vector<std::string> out;
  const auto ja = nlohmann::json::parse(run.run_config, nullptr, false), jb = nlohmann::json::parse(ref.run_config, nullptr, false);
  if (ja.is_object() && jb.is_object()) {
    std::set<std::string> keys;
    for (auto it = ja.begin(); it != ja.end(); ++it) keys.insert(it.key());
    for (auto it = jb.begin(); it != jb.end(); ++it) keys.insert(it.key());
    for (const auto& k : keys) {
      if (kNotTrainingKeys.count(k)) continue;
      const auto va = ja.contains(k) ? ja[k].dump() : std::string("(absent)"), vb = jb.contains(k) ? jb[k].dump() : std::string("(absent)");
      if (va != vb) out.push_back(fmt::format("{}: {} vs {}", k, va, vb));
    }
  }
  if (!run.shape.empty() && !ref.shape.empty() && run.shape != ref.shape)
    out.push_back(fmt::format("model shape: {} vs {}", run.shape, ref.shape));
  // The schedules, compared at the steps both traces recorded (REF looked up by step).
  std::map<std::int64_t, std::size_t> at;
  for (std::size_t i = 0; i < ref.steps.size(); ++i) at.emplace(ref.steps[i], i);
  bool lr_done = run.lr.empty() || ref.lr.empty(), loss_done = run.loss.empty() || ref.loss.empty();
  std::int64_t common = 0;
  for (std::size_t i = 0; i < run.steps.size() && !(lr_done && loss_done); ++i) {
    const auto it = at.find(run.steps[i]);
    if (it == at.end()) continue;
    ++common;
    const std::size_t j = it->second;
    if (!lr_done && i < run.lr.size() && j < ref.lr.size() && std::isfinite(run.lr[i]) && std::isfinite(ref.lr[j])) {
      const double a = run.lr[i], b = ref.lr[j];
      if (std::fabs(a - b) > kLrTolerance * std::max(std::fabs(a), std::fabs(b))) {
        out.push_back(fmt::format("learning rate at step {}: {} vs {}", run.steps[i], fmt_num(a), fmt_num(b)));
        lr_done = true;
      }
    }
    if (!loss_done && i < run.loss.size() && j < ref.loss.size() && std::isfinite(run.loss[i]) && std::isfinite(ref.loss[j])) {
      const double a = run.loss[i], b = ref.loss[j];
      if (std::fabs(a - b) > kFirstLossTolerance * std::max(std::fabs(a), std::fabs(b)))
        out.push_back(fmt::format("loss at step {}, the first both recorded: {} vs {} (another model, initialisation or data)",
                                  run.steps[i], fmt_num(a), fmt_num(b)));
      loss_done = true;  // only the first common step says something of the setup
    }
  }
  if (!run.steps.empty() && !ref.steps.empty() && common == 0)
    out.push_back(fmt::format("steps: {}..{} vs {}..{}, none in common", run.first_step, run.last_step, ref.first_step, ref.last_step));
  return out;
}

std::string same_numerics(const RunFacts& run, const RunFacts& ref) {
  if (!run.layer_numerics.empty() && !ref.layer_numerics.empty()) {
    if (run.layer_numerics != ref.layer_numerics) return {};
    // Where both traces record every layer's whole spec, it must agree too (the fix's parameters,
    // the scale); a trace without it is compared by policy and fix alone.
    auto whole = [](const RunFacts& f) {
      return f.layer_specs.size() == f.layer_numerics.size() &&
             std::none_of(f.layer_specs.begin(), f.layer_specs.end(), [](const std::string& x) { return x.empty(); });
    };
    if (whole(run) && whole(ref) && run.layer_specs != ref.layer_specs) return {};
    std::set<std::string> kinds(run.layer_numerics.begin(), run.layer_numerics.end());
    std::string named;
    for (const auto& k : kinds) named += (named.empty() ? "" : "; ") + k;
    // A config that names the numerics apart from the per-layer record (e.g. "precision") must agree too.
    const auto ja = nlohmann::json::parse(run.run_config, nullptr, false), jb = nlohmann::json::parse(ref.run_config, nullptr, false);
    if (ja.is_object() && jb.is_object())
      for (const char* k : kAttentionKeys)
        if (ja.contains(k) && jb.contains(k) && ja[k] != jb[k]) return {};
    return "recorded in every attention layer: " + named;
  }
  const auto ja = nlohmann::json::parse(run.run_config, nullptr, false), jb = nlohmann::json::parse(ref.run_config, nullptr, false);
  if (!ja.is_object() || !jb.is_object()) return {};
  std::string named;
  for (const char* k : kAttentionKeys) {
    const bool in_a = ja.contains(k), in_b = jb.contains(k);
    if (in_a != in_b || (in_a && ja[k] != jb[k])) return {};
    if (in_a) named += fmt::format("{}{} {}", named.empty() ? "" : ", ", k, ja[k].is_string() ? ja[k].get<std::string>() : ja[k].dump());
  }
  return named;
}

}  // namespace lpdiag::analysis
