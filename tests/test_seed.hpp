// The seed of a randomized test. CI is deterministic: each test passes a seed chosen once, and
// that seed is used and printed. LPDIAG_TEST_SEED=fresh draws a new seed per call (the sweeps of
// scripts/validate, outside CI); LPDIAG_TEST_SEED=N repeats a printed seed N.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

namespace lpdiag_test {

inline std::uint64_t seed(const char* what, std::uint64_t fixed) {
  std::uint64_t s = fixed;
  const char* env = std::getenv("LPDIAG_TEST_SEED");
  if (env && std::strcmp(env, "fresh") == 0) {
    s = (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    s &= 0xffffffffull;  // printable, and fits the unsigned seeds some tests take
  } else if (env && *env) {
    s = std::strtoull(env, nullptr, 10);
  }
  std::printf("[seed] %s: %llu%s\n", what, static_cast<unsigned long long>(s), s == fixed ? " (fixed)" : "");
  std::fflush(stdout);
  return s;
}

}  // namespace lpdiag_test
