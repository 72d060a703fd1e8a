// The guard's switchboard (guard.hpp).
#include "lpdiag/hooks/guard.hpp"

#include <stdexcept>

#include "lpdiag/attention/attention_spec.hpp"

namespace lpdiag::hooks {

void check_guard_name(const std::string& guard) {
  if (guard != "fp32" && guard != "sr" && guard != "paper")
    throw std::invalid_argument("guard must be \"fp32\", \"sr\" or \"paper\" (got \"" + guard + "\")");
}

std::string guarded_spec(const std::string& spec_json, const std::string& guard) {
  check_guard_name(guard);
  const AttentionSpec s = attention_spec_from_json(spec_json);
  const std::string policy = guard == "fp32" ? "fp32" : s.policy();
  const std::string fix = guard == "fp32" ? "none" : guard;
  return parse_attention_spec(policy, fix, level_name(s.level), s.config.causal, s.config.scale).to_json();
}

GuardBoard& GuardBoard::instance() {
  static GuardBoard b;
  return b;
}

void GuardBoard::set(std::int64_t layer, const std::string& guard) {
  check_guard_name(guard);
  std::lock_guard<std::mutex> lock(mu_);
  guards_[layer] = guard;
  any_ = true;
}

std::string GuardBoard::resolve(std::int64_t layer, const std::string& spec_json) {
  if (!any_.load(std::memory_order_relaxed) || layer < 0) return spec_json;
  std::string guard;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = guards_.find(layer);
    if (it == guards_.end()) return spec_json;
    guard = it->second;
  }
  thread_local std::map<std::pair<std::string, std::string>, std::string> cache;
  auto& out = cache[{spec_json, guard}];
  if (out.empty()) out = guarded_spec(spec_json, guard);
  return out;
}

void GuardBoard::clear_range(std::int64_t lo, std::int64_t hi) {
  std::lock_guard<std::mutex> lock(mu_);
  guards_.erase(guards_.lower_bound(lo), guards_.lower_bound(hi));
  any_ = !guards_.empty();
}

}  // namespace lpdiag::hooks
