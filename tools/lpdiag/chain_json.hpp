// The analysis result as JSON (for `analyze --json`, `report` and `watch`).
#pragma once
#include <nlohmann/json.hpp>

#include "lpdiag/analyzers/chain.hpp"

namespace lpdiag::cli {
nlohmann::json chain_to_json(const analysis::BinnedTrace& t, const analysis::ChainResult& c);
}
