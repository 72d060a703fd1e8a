#include "chain_json.hpp"

#include <cmath>

namespace lpdiag::cli {
namespace {
nlohmann::json num(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }
nlohmann::json opt_int(std::int64_t x) { return x >= 0 ? nlohmann::json(x) : nlohmann::json(nullptr); }
}  // namespace

nlohmann::json chain_to_json(const analysis::BinnedTrace& t, const analysis::ChainResult& c) {
  nlohmann::json links = nlohmann::json::object();
  for (const auto& l : c.links)
    links[l.id] = {{"name", l.name},
                   {"present", l.present},
                   {"onset_step", l.present ? nlohmann::json(l.onset_step) : nlohmann::json(nullptr)},
                   {"layer_index", opt_int(l.layer_index)},
                   {"head", opt_int(l.head)},
                   {"effect", num(l.effect)},
                   {"confidence", l.confidence},
                   {"evidence", l.evidence}};
  nlohmann::json j;
  j["files"] = t.files;
  j["records"] = t.records;
  j["first_step"] = t.first_step;
  j["last_step"] = t.last_step;
  const bool named = c.found || c.undecided;  // a chain's head, or an undecided candidate's
  j["chain"] = {{"found", c.found},
                {"undecided", c.undecided},
                {"layer_index", named ? nlohmann::json(c.layer_index) : nlohmann::json(nullptr)},
                {"head", named ? nlohmann::json(c.head) : nlohmann::json(nullptr)},
                {"confidence", c.confidence},
                {"links", links}};
  j["correlation"] = {{"computed", c.correlation.computed},
                      {"lag_bins", c.correlation.lag_bins},
                      {"r", num(c.correlation.r)},
                      {"p", num(c.correlation.p)}};
  j["missing_links"] = c.missing_links;
  j["untested_link"] = c.untested.empty() ? nlohmann::json() : nlohmann::json(c.untested);
  j["findings"] = c.findings;
  j["run"] = verdict_to_json(c.run);
  // false: too few records for any verdict (run.healthy then claims nothing).
  j["run"]["judged"] = c.judged;
  j["simultaneous_onsets"] = c.simultaneous;
  j["driving_evidence"] = c.driving.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.driving);
  j["decide_with"] = c.decide.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.decide);
  return j;
}

nlohmann::json verdict_to_json(const analysis::RunVerdict& v) {
  auto sign = [](const analysis::FailureSign& s) {
    nlohmann::json j{{"kind", s.kind}, {"onset_step", s.onset_step}, {"evidence", s.evidence}};
    if (s.layer_index >= 0) j["layer_index"] = s.layer_index, j["head"] = s.head;  // where the logits ran away first
    return j;
  };
  nlohmann::json signs = nlohmann::json::array();
  for (const auto& s : v.signs) signs.push_back(sign(s));
  nlohmann::json warnings = nlohmann::json::array();
  for (const auto& s : v.warnings) warnings.push_back(sign(s));
  return {{"healthy", v.healthy},
          {"failure", v.healthy ? nlohmann::json(nullptr) : sign(v.failure)},
          {"signs", signs},
          {"warnings", warnings},
          {"final_loss", num(v.final_loss)},
          {"max_logit", v.max_logit >= 0 ? num(v.max_logit) : nlohmann::json(nullptr)}};
}

static nlohmann::json head_growth_to_json(const analysis::HeadGrowthComparison& g) {
  return {{"layer_index", g.layer_index}, {"head", g.head},           {"from_step", g.from_step},
          {"to_step", g.to_step},         {"run_growth", num(g.run_growth)}, {"ref_growth", num(g.ref_growth)},
          {"ref_median_growth", num(g.ref_median_growth)}, {"by_numerics", g.by_numerics}, {"evidence", g.evidence}};
}

nlohmann::json reference_to_json(const analysis::ReferenceComparison& r) {
  return {{"path", r.path},
          {"failed", r.failed},
          {"attributable_to_attention_numerics", r.attributable ? nlohmann::json(*r.attributable) : nlohmann::json(nullptr)},
          {"evidence", r.evidence},
          {"config_differences", r.config_differences},
          {"head_growth", r.head_growth ? head_growth_to_json(*r.head_growth) : nlohmann::json(nullptr)}};
}

}  // namespace lpdiag::cli
