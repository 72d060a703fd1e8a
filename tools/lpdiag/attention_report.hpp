// Shared by `replay` and `probe`: parsing policy/fix lists, running every combination, and
// printing the evidence as a table or JSON.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lpdiag/attention/summary.hpp"

namespace lpdiag::cli {

// "fa2,seed,fp8-p:e5m2" -> configs with the policy (and fp8 format) set.
std::vector<AttentionConfig> parse_policy_list(const std::string& text);
// "none,paper:beta=7,tol=1e-3,safe" -> 3 fixes: a piece with '=' and no ':' continues the
// previous fix's parameters.
std::vector<FixConfig> parse_fix_list(const std::string& text);

std::string format_table_header();
// What each column of the table means, one paragraph.
std::string format_table_legend();
std::string format_table_row(const AttentionSummary& s);
nlohmann::json to_json(const AttentionSummary& s);

}  // namespace lpdiag::cli
