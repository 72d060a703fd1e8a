#include "lpdiag/attention/attention_config.hpp"

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lpdiag/error.hpp"

namespace lpdiag {

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::fa2: return "fa2";
    case Policy::fa2_sequential: return "fa2-seq";
    case Policy::seed: return "seed";
    case Policy::seed_mma: return "seed-mma";
    case Policy::fp32: return "fp32";
    case Policy::fp8_p: return "fp8-p";
  }
  return "?";
}

Policy parse_policy(const std::string& name) {
  if (name == "fa2") return Policy::fa2;
  if (name == "fa2-seq") return Policy::fa2_sequential;
  if (name == "seed") return Policy::seed;
  if (name == "seed-mma") return Policy::seed_mma;
  if (name == "fp32") return Policy::fp32;
  if (name == "fp8-p" || name == "fp8-p:e4m3" || name == "fp8-p:e5m2") return Policy::fp8_p;
  throw InvalidArgument("unknown attention policy '" + name + "'; expected fa2, fa2-seq, seed, seed-mma, fp32, fp8-p or fp8-p:e5m2");
}

AttentionConfig parse_policy_spec(const std::string& text) {
  AttentionConfig c;
  std::string name = text;
  if (const auto colon = text.find(":tile="); colon != std::string::npos) {
    name = text.substr(0, colon);
    const std::string n = text.substr(colon + 6);
    std::size_t used = 0;
    int tile = 0;
    try {
      tile = std::stoi(n, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != n.size() || n.empty() || tile < 1)
      throw InvalidArgument("policy '" + text + "': tile must be a positive integer, got '" + n + "'");
    c.tile_k = tile;
  }
  c.policy = parse_policy(name);
  if (name == "fp8-p:e5m2") c.fp8_format = FormatId::e5m2;
  return c;
}

std::string FixConfig::name() const {
  switch (kind) {
    case Kind::none: return "none";
    case Kind::paper: return "paper";
    case Kind::safe: return "safe";
    case Kind::sr: return "sr";
  }
  return "?";
}

std::string FixConfig::to_json() const {
  nlohmann::json j{{"kind", name()}};
  if (shifts()) j["tol"] = tol;
  if (kind == Kind::sr) j["seed"] = seed;
  if (kind == Kind::paper) j["beta"] = beta;
  if (kind == Kind::safe) j["offset"] = offset;
  return j.dump();
}

namespace {
// The JSON form FixConfig::to_json writes (and the trace records): {"kind": ..., parameters}.
FixConfig parse_fix_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_object() && j.empty()) return FixConfig{};  // "{}": a trace's default, no fix declared
  if (!j.is_object() || !j.contains("kind") || !j["kind"].is_string())
    throw InvalidArgument("fix '" + text + "' is not a JSON object with a \"kind\"");
  std::string t = j["kind"].get<std::string>(), sep = ":";
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "kind") continue;
    if (!it.value().is_number()) throw InvalidArgument("fix '" + text + "': parameter '" + it.key() + "' is not a number");
    nlohmann::json v = it.value();
    t += sep + it.key() + "=" + v.dump();
    sep = ",";
  }
  return parse_fix(t);
}
}  // namespace

FixConfig parse_fix(const std::string& text) {
  if (!text.empty() && text.front() == '{') return parse_fix_json(text);
  FixConfig f;
  const auto colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  if (kind == "none") f.kind = FixConfig::Kind::none;
  else if (kind == "paper") f.kind = FixConfig::Kind::paper;
  else if (kind == "safe") f.kind = FixConfig::Kind::safe;
  else if (kind == "sr") f.kind = FixConfig::Kind::sr;
  else throw InvalidArgument("unknown fix '" + kind + "'; expected none, paper, safe or sr (e.g. paper:beta=7,tol=1e-3)");
  if (colon == std::string::npos) return f;
  if (f.kind == FixConfig::Kind::none) throw InvalidArgument("fix 'none' takes no parameters");
  std::stringstream ss(text.substr(colon + 1));
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw InvalidArgument("fix parameter '" + item + "' is not key=value");
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    double v = 0;
    std::size_t used = 0;
    try {
      v = std::stod(val, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != val.size() || !std::isfinite(v)) throw InvalidArgument("fix parameter '" + key + "' has a bad value '" + val + "'");
    if (key == "seed" && f.kind == FixConfig::Kind::sr && v >= 0 && v < 4294967296.0 && v == std::floor(v))
      f.seed = static_cast<std::uint32_t>(v);
    else if (key == "tol" && f.shifts() && v >= 0) f.tol = v;
    else if (key == "beta" && f.kind == FixConfig::Kind::paper && v > 0) f.beta = v;
    else if (key == "offset" && f.kind == FixConfig::Kind::safe && v > 0) f.offset = v;
    else throw InvalidArgument("fix " + f.name() + " has no parameter '" + key + "' with value " + val +
                               " (paper: tol>=0, beta>0; safe: tol>=0, offset>0; sr: seed, an integer in [0, 2^32))");
  }
  return f;
}

}  // namespace lpdiag
