// The analysis result as JSON (for `analyze --json`, `report` and `watch`).
#pragma once
#include <nlohmann/json.hpp>

#include "lpdiag/analyzers/chain.hpp"
#include "lpdiag/analyzers/reference_run.hpp"

namespace lpdiag::cli {
nlohmann::json chain_to_json(const analysis::BinnedTrace& t, const analysis::ChainResult& c);
// {"healthy": bool, "failure": null | {"kind", "onset_step", "evidence"}, "signs": [...], ...}
nlohmann::json verdict_to_json(const analysis::RunVerdict& v);
// {"path", "failed", "attributable_to_attention_numerics": true|false|null, "evidence", "config_differences",
//  "head_growth": null | {"layer_index", "head", "from_step", "to_step", "run_growth", "ref_growth",
//  "ref_median_growth", "by_numerics", "evidence"}}
nlohmann::json reference_to_json(const analysis::ReferenceComparison& r);
}
