#include "lpdiag/analyzers/recorded_numerics.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "lpdiag/attention/attention_config.hpp"

namespace lpdiag::analysis {
namespace {

bool runs_fp32(const std::string& policy) {
  if (policy == "fp32") return true;
  return policy.rfind("external", 0) == 0 && policy.find("fp32") != std::string::npos;
}

// The fix's name from the recorded JSON; the text itself where it does not parse.
std::string fix_name(const std::string& recorded) {
  try {
    return parse_fix(recorded).name();
  } catch (const std::exception&) {
    return recorded;
  }
}

void add_distinct(std::vector<std::string>& seen, std::string& joined, const std::string& x) {
  for (const auto& y : seen)
    if (y == x) return;
  seen.push_back(x);
  joined += (joined.empty() ? "" : ", ") + x;
}

// C1 and C2 of a run whose attention lpdiag did not run: not measured, and why.
void say_not_recorded(ChainResult& c, const RecordedNumerics& n) {
  for (int i : {0, 1}) {
    LinkResult& l = c.links[static_cast<std::size_t>(i)];
    if (l.present) continue;
    const std::string was = fmt::format("{} {} not found: {}", l.id, l.name, l.evidence);
    l.evidence = fmt::format("not recorded: attention ran in a kernel lpdiag did not run, in every layer (policy {}), so there are no "
                             "{}; run the attention through lpdiag (gpt2_train --attention lpdiag, or lpdiag.patch_sdpa in Python) "
                             "to record them",
                             n.policy, i == 0 ? "repeated-maxima counters" : "error statistics");
    for (auto& f : c.findings)
      if (f == was) f = fmt::format("{} {} not found: {}", l.id, l.name, l.evidence);
  }
}

}  // namespace

RecordedNumerics recorded_numerics(const std::vector<AttentionLayerSpec>& layers) {
  RecordedNumerics n;
  n.known = !layers.empty();
  n.all_fp32 = n.all_external = n.known;
  std::vector<std::string> policies, fixes, kernels;
  for (const auto& l : layers) {
    const auto spec = nlohmann::json::parse(l.spec.empty() ? std::string("{}") : l.spec, nullptr, false);
    if (spec.is_object() && spec.value("observed", false)) {
      n.observed = true;
      if (spec.contains("observe_every") && spec["observe_every"].is_number_integer())
        n.observe_every = std::max<std::int64_t>(n.observe_every, spec["observe_every"].get<std::int64_t>());
      add_distinct(kernels, n.observed_kernels, l.policy);
    }
    n.all_fp32 = n.all_fp32 && runs_fp32(l.policy);
    n.all_external = n.all_external && l.policy.rfind("external", 0) == 0;
    add_distinct(policies, n.policy, l.policy);
    add_distinct(fixes, n.fix, fix_name(l.fix));
  }
  return n;
}

void account_for_numerics(ChainResult& c, const RecordedNumerics& n) {
  if (n.all_external && !n.observed) say_not_recorded(c, n);
  if (c.run.healthy || !n.known || c.open_finding < 0 || c.open_finding >= static_cast<int>(c.findings.size())) return;
  // The paper's shift m = beta * max leaves the max entry exp(-(beta - 1) max): past a logit of
  // ~87 (beta 2) that underflows fp32 and the row sum can vanish. Every paper-fix run of
  // docs/results/validation.md turned non-finite this way while its no-fix twin did not.
  if (n.fix == "paper" && c.run.failure.kind == "non_finite")
    c.findings.insert(c.findings.begin() + c.open_finding,
                      fmt::format("the paper's fix ran: its shift m = beta * max gives the largest entry exp(-(beta - 1) * max), which "
                                  "underflows fp32 once a logit passes ~87 at beta 2 (the largest recorded here: {}), so the fix itself "
                                  "can make the row sum vanish and the run non-finite; lpdiag's safe fix (--fix safe) never underflows",
                                  c.run.max_logit >= 0 ? fmt::format("{:.3g}", c.run.max_logit) : std::string("not recorded"))),
        ++c.open_finding;  // before `open` is taken: the insert moves the findings
  std::string& open = c.findings[static_cast<std::size_t>(c.open_finding)];
  if (n.all_fp32) {
    open = fmt::format("attention ran in fp32 in every layer (policy {}): this failure is not low-precision attention rounding's; its cause "
                       "lies elsewhere (the learning rate, its schedule, the data, the model's other precision)",
                       n.policy);
    c.decide.clear();
    c.open_finding = -1;
    return;
  }
  if (n.fix != "none" && !n.fix.empty()) {
    // The same question, its counterfactual turned to the fix that ran, whatever form it takes
    // (no chain, a candidate, a chain that order and correlation only suggest).
    const std::string generic = deciding_run(), tailored = deciding_run(fmt::format(
        "with fp32 attention (gpt2_train --attention sdpa-fp32) or without the fix this run ran ({}; --fix none)", n.fix));
    if (const auto at = open.find(generic); at != std::string::npos) open.replace(at, generic.size(), tailored);
    if (c.decide == generic) c.decide = tailored;
  }
}

}  // namespace lpdiag::analysis
