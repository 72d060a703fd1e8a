// The typed attention spec (attention_spec.hpp): every text form it is parsed from and written
// to reads back to the same spec. Fresh random fix parameters (seed printed); exact equality,
// since the JSON writes doubles in their shortest round-trip form.
#include <cstdio>
#include <random>

#include "catch_compat.hpp"
#include "lpdiag/attention/attention_spec.hpp"
#include "lpdiag/error.hpp"
#include "test_seed.hpp"

using namespace lpdiag;

namespace {
bool same(const AttentionSpec& a, const AttentionSpec& b) {
  const AttentionConfig &x = a.config, &y = b.config;
  return a.level == b.level && x.policy == y.policy && x.fp8_format == y.fp8_format && x.tile_k == y.tile_k &&
         x.causal == y.causal && x.scale == y.scale && x.fix.kind == y.fix.kind && x.fix.tol == y.fix.tol &&
         x.fix.beta == y.fix.beta && x.fix.offset == y.fix.offset && x.fix.seed == y.fix.seed;
}
}  // namespace

TEST_CASE("an attention spec reads back from its policy text, its fix JSON and its own JSON", "[attention][spec]") {
  const unsigned seed = lpdiag_test::seed("test_attention_spec#9", 1071274u);
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(1e-6, 10.0);
  const char* policies[] = {"fa2", "fa2-seq", "seed", "seed:tile=512", "fp32:tile=128", "fp8-p", "fp8-p:e5m2", "fp8-p:e5m2:tile=32"};
  const char* levels[] = {"off", "counters", "full"};
  for (int trial = 0; trial < 200; ++trial) {
    const std::string policy = policies[rng() % 8], level = levels[rng() % 3];
    std::string fix;
    switch (rng() % 4) {
      case 0: fix = "none"; break;
      case 1: fix = "paper:beta=" + std::to_string(u(rng)) + ",tol=" + std::to_string(u(rng) / 100); break;
      case 2: fix = "safe:offset=" + std::to_string(u(rng)) + ",tol=0"; break;
      default: fix = "sr:seed=" + std::to_string(rng()); break;
    }
    const bool causal = rng() % 2;
    const AttentionSpec s = parse_attention_spec(policy, fix, level, causal, rng() % 2 ? 0.0 : u(rng));
    CAPTURE(policy, fix, level, s.to_json());
    // The canonical policy text, the fix's JSON (what the trace records), and the spec's JSON.
    const AttentionSpec back = parse_attention_spec(s.policy(), s.fix_json(), level_name(s.level), causal, s.config.scale);
    CHECK(same(s, back));
    CHECK(same(s, attention_spec_from_json(s.to_json())));
    CHECK(s.policy() == (policy == "fp8-p:e5m2:tile=32" ? "fp8-p:e5m2:tile=32" : policy));
  }
}

TEST_CASE("a spec's bad parts are named", "[attention][spec]") {
  CHECK_THROWS_WITH(parse_level("ful"), lpdiag_test::contains("off, counters or full"));
  CHECK_THROWS_WITH(parse_attention_spec("fa3", "none", "off", false), lpdiag_test::contains("unknown attention policy 'fa3'"));
  CHECK_THROWS_WITH(parse_fix("{\"kind\":\"paper\",\"beta\":\"x\"}"), lpdiag_test::contains("is not a number"));
  CHECK_THROWS_WITH(parse_fix("{\"beta\":2}"), lpdiag_test::contains("\"kind\""));
  CHECK(parse_fix("{}").kind == FixConfig::Kind::none);  // a trace's default: no fix declared
  CHECK_THROWS_WITH(attention_spec_from_json("[1]"), lpdiag_test::contains("\"policy\""));
}
