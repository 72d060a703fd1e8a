#include "attention_report.hpp"

#include <fmt/core.h>

#include <cmath>
#include <sstream>

#include "lpdiag/error.hpp"

namespace lpdiag::cli {
namespace {
std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}
nlohmann::json number(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }
}  // namespace

std::vector<AttentionConfig> parse_policy_list(const std::string& text) {
  std::vector<AttentionConfig> out;
  for (const auto& p : split(text)) {
    out.push_back(parse_policy_spec(p));
  }
  if (out.empty()) throw InvalidArgument("no policy given");
  return out;
}

std::vector<FixConfig> parse_fix_list(const std::string& text) {
  std::vector<std::string> specs;
  for (const auto& piece : split(text)) {
    if (piece.find('=') != std::string::npos && piece.find(':') == std::string::npos && !specs.empty())
      specs.back() += "," + piece;
    else
      specs.push_back(piece);
  }
  std::vector<FixConfig> out;
  for (const auto& s : specs) out.push_back(parse_fix(s));
  if (out.empty()) throw InvalidArgument("no fix given");
  return out;
}

std::string format_table_legend() {
  return "columns: O err mean and O z: the signed error of O against the fp64 reference, its mean and z (one-signed rounding "
         "shows as a large |z|); worst z: the worst feature column's z; δ err mean, δ z: the same for δ = rowsum(dO ∘ O); D: "
         "the summed δ error (the paper's driver); rep.rows: rows whose maximum repeats; P̄==1: probability entries rounded "
         "to exactly 1; fixed: rows the fix changed; NaN: non-finite outputs; |z|-ex: |z| beyond exact rounding's (the "
         "gate); O rms: the O error's RMS";
}

std::string format_table_header() {
  return fmt::format("{:<11} {:<6} {:>11} {:>8} {:>8} {:>11} {:>8} {:>11} {:>9} {:>9} {:>8} {:>6}", "policy", "fix",
                     "O err mean", "O z", "worst z", "δ err mean", "δ z", "D", "rep.rows", "P̄==1", "fixed", "NaN");
}

std::string format_table_row(const AttentionSummary& s) {
  return fmt::format("{:<11} {:<6} {:>+11.3e} {:>+8.2f} {:>+8.2f} {:>+11.3e} {:>+8.2f} {:>+11.3e} {:>9} {:>9} {:>8} {:>6}",
                     s.policy, s.fix, s.o_err_mean, s.o_err_z, s.o_err_worst_column_z, s.delta_err_mean, s.delta_err_z,
                     s.driver_d, s.repeated_max_rows, s.pbar_one_entries, s.fix_engaged_rows, s.nan_count);
}

nlohmann::json to_json(const AttentionSummary& s) {
  return {{"policy", s.policy},
          {"fix", s.fix},
          {"fix_params", nlohmann::json::parse(s.fix_json)},
          {"o_err_mean", number(s.o_err_mean)},
          {"o_err_z", number(s.o_err_z)},
          {"o_err_worst_column_z", number(s.o_err_worst_column_z)},
          {"delta_err_mean", number(s.delta_err_mean)},
          {"delta_err_z", number(s.delta_err_z)},
          {"driver_d", number(s.driver_d)},
          {"o_err_rms", number(s.o_err_rms)},
          {"rows", s.rows},
          {"repeated_max_rows", s.repeated_max_rows},
          {"pbar_one_entries", s.pbar_one_entries},
          {"fix_engaged_rows", s.fix_engaged_rows},
          {"nan_count", s.nan_count}};
}

}  // namespace lpdiag::cli
