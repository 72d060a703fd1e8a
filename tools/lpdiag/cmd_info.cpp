// `lpdiag info TRACE [--json]`: what a trace holds, without analyzing it. Works on a trace that
// is still being written (SWMR).
#include <fmt/core.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "lpdiag/command.hpp"
#include "lpdiag/trace/preflight.hpp"
#include "lpdiag/trace/trace_reader.hpp"
#include "lpdiag/trace/writer_lock.hpp"

namespace lpdiag::cli {
namespace {

struct InfoArgs {
  std::string path;
  bool json = false;
};

// A one-line summary of the run_config JSON: its top-level scalar fields.
std::string config_summary(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return "(run_config is not valid JSON)";
  if (!j.is_object() || j.empty()) return "(empty)";
  std::string s;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!s.empty()) s += ", ";
    s += it.key() + "=" + (it->is_string() ? it->get<std::string>() : it->dump());
    if (s.size() > 160) return s.substr(0, 160) + "...";
  }
  return s;
}

int run_info(const InfoArgs& a) {
  preflight_trace(a.path);
  TraceReader r(a.path);
  const TraceMeta& m = r.meta();
  const std::int64_t n = r.records();
  std::int64_t first = -1, last = -1;
  if (n > 0) {
    first = r.steps(0, 1)[0];
    last = r.steps(n - 1, 1)[0];
  }
  const std::int64_t events = r.event_count();
  const TraceLayout& L = r.layout();
  if (a.json) {
    nlohmann::json j;
    j["file"] = a.path;
    j["format"] = m.format;
    j["version"] = m.version;
    j["producer"] = m.producer;
    j["created_utc"] = m.created_utc;
    j["rank"] = m.rank;
    j["world_size"] = m.world_size;
    j["live"] = r.live();
    const nlohmann::json cfg = nlohmann::json::parse(m.run_config, nullptr, false);
    j["run_config"] = cfg.is_discarded() ? nlohmann::json(m.run_config) : cfg;
    j["records"] = n;
    j["first_step"] = n > 0 ? nlohmann::json(first) : nlohmann::json(nullptr);
    j["last_step"] = n > 0 ? nlohmann::json(last) : nlohmann::json(nullptr);
    j["events"] = events;
    j["scalars"] = L.scalars;
    j["attention_layers"] = nlohmann::json::array();
    for (const auto& l : L.attention)
      j["attention_layers"].push_back({{"name", l.name}, {"layer_index", l.layer_index}, {"n_heads", l.n_heads},
                                       {"head_dim", l.head_dim}, {"policy", l.policy}});
    j["matrices"] = nlohmann::json::array();
    for (const auto& mm : L.matrices)
      j["matrices"].push_back({{"name", mm.name}, {"role", mm.role}, {"layer_index", mm.layer_index},
                               {"rows", mm.rows}, {"cols", mm.cols}, {"n_heads", mm.n_heads}});
    j["activations"] = L.activations.size();
    std::cout << j.dump(2) << "\n";
    return kOk;
  }
  std::cout << fmt::format("{}\n", a.path);
  std::cout << fmt::format("  format      {} v{}{}\n", m.format, m.version, r.live() ? (WriterLock::held_by_another(a.path) ? "  (live: a writer is recording it now)"
                                                        : "  (its writer died without closing it: `lpdiag repair FILE` lets h5py and h5ls open it)")
                   : "");
  std::cout << fmt::format("  producer    {}\n", m.producer);
  std::cout << fmt::format("  created     {}   rank {} of {}\n", m.created_utc, m.rank, m.world_size);
  std::cout << fmt::format("  run config  {}\n", config_summary(m.run_config));
  if (n > 0) std::cout << fmt::format("  records     {}   steps {} .. {}\n", n, first, last);
  else std::cout << "  records     0\n";
  std::cout << fmt::format("  scalars     {}\n", fmt::format("{}", fmt::join(L.scalars, ", ")));
  std::cout << fmt::format("  attention   {} layers\n", L.attention.size());
  for (const auto& l : L.attention)
    std::cout << fmt::format("    [{:>2}] {:<24} {} heads x d{}  policy {}\n", l.layer_index, l.name, l.n_heads, l.head_dim, l.policy);
  std::cout << fmt::format("  matrices    {}\n", L.matrices.size());
  for (const auto& mm : L.matrices)
    std::cout << fmt::format("    [{:>2}] {:<24} {:<9} {}x{}{}\n", mm.layer_index, mm.name, mm.role, mm.rows, mm.cols,
                             mm.n_heads > 0 ? fmt::format("  ({} heads)", mm.n_heads) : "");
  std::cout << fmt::format("  activations {}\n", L.activations.size());
  std::cout << fmt::format("  events      {}\n", events);
  return kOk;
}

}  // namespace

Registration register_info(CLI::App& app) {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* sub = app.add_subcommand("info", "Summarize a trace: format, run config, steps, layers, matrices, events");
  sub->add_option("trace", args->path, "Trace file (.h5)")->required();
  sub->add_flag("--json", args->json, "Print one JSON object on stdout");
  return {sub, [args] { return run_info(*args); }};
}

}  // namespace lpdiag::cli
