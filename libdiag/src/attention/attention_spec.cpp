#include "lpdiag/attention/attention_spec.hpp"

#include <nlohmann/json.hpp>

#include "lpdiag/error.hpp"

namespace lpdiag {

const char* level_name(Level l) {
  switch (l) {
    case Level::off: return "off";
    case Level::counters: return "counters";
    case Level::full: return "full";
  }
  return "?";
}

Level parse_level(const std::string& name) {
  if (name == "off") return Level::off;
  if (name == "counters") return Level::counters;
  if (name == "full") return Level::full;
  throw InvalidArgument("level must be off, counters or full, got '" + name + "'");
}

std::string policy_spec_name(const AttentionConfig& c) {
  std::string s = policy_name(c.policy);
  if (c.policy == Policy::fp8_p && c.fp8_format == FormatId::e5m2) s += ":e5m2";
  if (c.tile_k != AttentionConfig{}.tile_k) s += ":tile=" + std::to_string(c.tile_k);
  return s;
}

std::string AttentionSpec::to_json() const {
  return nlohmann::json{{"policy", policy()},
                        {"fix", nlohmann::json::parse(fix_json())},
                        {"level", level_name(level)},
                        {"causal", config.causal},
                        {"scale", config.scale}}
      .dump();
}

AttentionSpec parse_attention_spec(const std::string& policy, const std::string& fix, const std::string& level, bool causal,
                                   double scale) {
  AttentionSpec s;
  s.config = parse_policy_spec(policy);
  s.config.fix = parse_fix(fix);
  s.config.causal = causal;
  s.config.scale = scale;
  s.level = parse_level(level);
  return s;
}

AttentionSpec attention_spec_from_json(const std::string& json) {
  const auto j = nlohmann::json::parse(json, nullptr, false);
  if (!j.is_object() || !j.contains("policy") || !j["policy"].is_string())
    throw InvalidArgument("attention spec is not a JSON object with a \"policy\": " + json.substr(0, 200));
  auto str = [&](const char* key, const char* dflt) { return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string(dflt); };
  const std::string fix = j.contains("fix") ? (j["fix"].is_string() ? j["fix"].get<std::string>() : j["fix"].dump()) : "none";
  return parse_attention_spec(j["policy"].get<std::string>(), fix, str("level", "counters"),
                              j.contains("causal") && j["causal"].is_boolean() && j["causal"].get<bool>(),
                              j.contains("scale") && j["scale"].is_number() ? j["scale"].get<double>() : 0.0);
}

}  // namespace lpdiag
